#include "shim/core/pointer_attributes.h"

#include <cstring>

namespace memvirt::shim {
namespace {

template <typename T>
CUresult Put(void* data, T value) {
  std::memcpy(data, &value, sizeof(T));
  return CUDA_SUCCESS;
}

}  // namespace

CUresult AnswerPointerAttribute(const AllocationFacts& facts, CUpointer_attribute attribute,
                                void* data, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      return Put<CUcontext>(data, facts.context);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return Put<unsigned int>(data, CU_MEMORYTYPE_DEVICE);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      return Put<CUdeviceptr>(data, ptr);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return Put<int>(data, 1);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return Put<unsigned long long>(data, facts.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      return Put<int>(data, facts.ipc_capable ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      return Put<int>(data, 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return Put<int>(data, facts.device_ordinal);
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return Put<CUdeviceptr>(data, facts.range_bytes != 0 ? facts.range_base : facts.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return Put<size_t>(data, facts.range_bytes != 0 ? facts.range_bytes : facts.bytes);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      return Put<size_t>(data, facts.bytes);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      return Put<void*>(data, reinterpret_cast<void*>(facts.base));
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      return Put<unsigned long long>(data, facts.handle_types);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      return Put<unsigned int>(data, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return Put<CUmemoryPool>(data, nullptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:  // device memory is not host-mapped
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:    // nv-p2p tokens need real cuMemAlloc memory
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace memvirt::shim

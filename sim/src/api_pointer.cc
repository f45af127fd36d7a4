// Exported entry points: cuPointerGetAttribute / cuPointerGetAttributes.
#include <sys/mman.h>

#include <cstring>

#include "api_common.h"
#include "memvirt/common/pointer_attribute_table.h"

using memsim::Device;
using memsim::RangeInfo;
using memvirt::cuda_abi::PointerAttributeBytes;
using memvirt::cuda_abi::ReadPointerAttribute;
using namespace memsim::api;

namespace {

// Note [pointer kinds]: device memory (cuMemAlloc, pools, VMM mappings) reports
// CU_MEMORYTYPE_DEVICE; page-locked host memory the driver knows reports CU_MEMORYTYPE_HOST with
// identical host and device pointers (unified addressing); anything else is unknown to the
// driver: cuPointerGetAttribute fails with CUDA_ERROR_INVALID_VALUE and cuPointerGetAttributes
// reports zeros.
struct PointerFacts {
  enum class Kind { kUnknown, kDevice, kHost } kind = Kind::kUnknown;
  Device* device = nullptr;
  RangeInfo range;         // device
  memsim::HostRange host;  // host
};

PointerFacts Inspect(CUdeviceptr ptr) {
  PointerFacts f;
  if (Device* dev = D().DeviceForAddress(ptr)) {
    auto info = dev->va().Lookup(ptr);
    if (info && info->kind != RangeInfo::Kind::kReserved) {
      f.kind = PointerFacts::Kind::kDevice;
      f.device = dev;
      f.range = *info;
    }
    return f;
  }
  if (auto host = D().host_memory.Lookup(ptr)) {
    f.kind = PointerFacts::Kind::kHost;
    f.host = *host;
  }
  return f;
}

template <typename T>
CUresult Put(void* data, T value) {
  std::memcpy(data, &value, sizeof(T));
  return CUDA_SUCCESS;
}

CUresult Attribute(const PointerFacts& f, CUdeviceptr ptr, CUpointer_attribute attr, void* data) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool device = f.kind == PointerFacts::Kind::kDevice;
  const bool host = f.kind == PointerFacts::Kind::kHost;
  const bool mapped = device && f.range.kind == RangeInfo::Kind::kMapped;
  if (!device && !host) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      void* owner = device ? f.range.owner : f.host.owner;
      return Put<CUcontext>(data, static_cast<CUcontext>(owner));
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      return Put<unsigned int>(data, device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      return Put<CUdeviceptr>(data, ptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (device) return CUDA_ERROR_INVALID_VALUE;  // device memory is not host-mapped
      return Put<void*>(data, reinterpret_cast<void*>(ptr));
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      return Put<int>(data, 1);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      return Put<unsigned long long>(data, device ? f.range.buffer_id : f.host.buffer_id);
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      return Put<int>(data, 0);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      return Put<int>(data, device ? f.device->ordinal() : 0);
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:  // Note [ipc backing] in ipc.h
      return Put<int>(data, device && f.range.kind == RangeInfo::Kind::kClassic &&
                                f.range.pool == nullptr && !f.range.imported &&
                                f.device->va().classic_fd() >= 0);
    // The allocation's range: for VMM mappings the reservation (cuMemAddressReserve) holding
    // the mapping, as documented; MAPPING_BASE_ADDR / MAPPING_SIZE give the cuMemMap range.
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return Put<CUdeviceptr>(data, !device  ? f.host.base
                                    : mapped ? f.range.reservation_base
                                             : f.range.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      return Put<size_t>(data, !device  ? f.host.size
                               : mapped ? f.range.reservation_size
                                        : f.range.size);
    case CU_POINTER_ATTRIBUTE_MAPPED:
      return Put<int>(data, 1);
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      return Put<unsigned long long>(
          data, device && f.range.kind == RangeInfo::Kind::kMapped
                    ? static_cast<unsigned long long>(f.range.physical->prop().requestedHandleTypes)
                    : 0ULL);
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      return Put<int>(data, 0);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
      int prot = device ? f.range.prot : (PROT_READ | PROT_WRITE);
      unsigned v = (prot & PROT_WRITE)  ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                   : (prot & PROT_READ) ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READ
                                        : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE;
      return Put<unsigned int>(data, v);
    }
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return Put<CUmemoryPool>(data, device ? f.range.pool : nullptr);
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      return Put<size_t>(data, device ? f.range.size : f.host.size);
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      return Put<void*>(data, reinterpret_cast<void*>(device ? f.range.base : f.host.base));
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return Put<unsigned long long>(data, device && f.range.physical
                                               ? f.range.physical->id()
                                               : (device ? f.range.buffer_id : f.host.buffer_id));
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      return Put<int>(data, 0);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (CUresult r = RequireInit()) return r;
  CUpointer_attribute attr;
  if (!ReadPointerAttribute(&attribute, &attr)) return CUDA_ERROR_INVALID_VALUE;
  return Attribute(Inspect(ptr), ptr, attr, data);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr ptr) {
  if (CUresult r = RequireInit()) return r;
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Malformed arguments fail before anything is written.
  CUpointer_attribute attr;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr || !ReadPointerAttribute(&attributes[i], &attr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const PointerFacts facts = Inspect(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    ReadPointerAttribute(&attributes[i], &attr);
    // Unknown memory or an attribute that does not apply gets the default NULL (zero) value of
    // its whole type instead of failing the call, as documented for cuPointerGetAttributes.
    std::memset(data[i], 0, PointerAttributeBytes(attr));
    Attribute(facts, ptr, attr, data[i]);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerSetAttribute(const void* value, CUpointer_attribute attribute,
                                       CUdeviceptr ptr) {
  if (CUresult r = RequireInit()) return r;
  if (value == nullptr || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Inspect(ptr).kind == PointerFacts::Kind::kDevice ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"

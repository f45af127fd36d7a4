// The CUDA driver's pointer-attribute enumeration as data: which values are
// attributes and how many bytes each one's value has. Header-only, so that the
// simulated driver (sim/) and the shim (shim/) answer cuPointerGetAttribute(s)
// from one table without either linking the other's code.
//
// Thread safety: pure functions.
#ifndef MEMVIRT_COMMON_POINTER_ATTRIBUTE_TABLE_H_
#define MEMVIRT_COMMON_POINTER_ATTRIBUTE_TABLE_H_

#include <cuda.h>

#include <cstddef>
#include <cstring>

namespace memvirt::cuda_abi {

static_assert(sizeof(CUpointer_attribute) == sizeof(int));

// Reads an attribute an application passed, which may be any integer: it is
// inspected as one, and loaded as the enum type only when it is inside the
// enumeration (an out-of-range enum load is undefined). False outside it.
inline bool ReadPointerAttribute(const CUpointer_attribute* attribute, CUpointer_attribute* out) {
  int raw;
  std::memcpy(&raw, attribute, sizeof(raw));
  if (raw < CU_POINTER_ATTRIBUTE_CONTEXT || raw > CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE) {
    return false;
  }
  *out = static_cast<CUpointer_attribute>(raw);
  return true;
}

// The size of the attribute's value type (what cuPointerGetAttributes zeroes
// for an attribute that does not apply); 0 for a value outside the
// enumeration. REQUIRES: `attribute` was read with ReadPointerAttribute.
constexpr size_t PointerAttributeBytes(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
      return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      return sizeof(unsigned int);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      return sizeof(int);
  }
  return 0;
}

}  // namespace memvirt::cuda_abi

#endif  // MEMVIRT_COMMON_POINTER_ATTRIBUTE_TABLE_H_

// cuPointerGetAttribute(s) answers for memory the shim allocated.
//
// Note [pointer attributes]
//   Shim memory is cuMemAlloc memory to the application, so every attribute
//   the driver documents is answered as the driver answers it for a
//   cuMemAlloc allocation of that size (the reference the tests compare
//   against), from the shim's allocator, whatever the chunk's residence:
//   device memory of the core's context and device; range start/size and
//   mapping base/size = the allocation; mapped, read-write access, sync
//   memops 1; not managed, no pool, no handle types; buffer id and memory
//   block id unique over the process lifetime (Note [buffer ids] in
//   shim_core.h). IS_LEGACY_CUDA_IPC_CAPABLE is 1 where the shim can export
//   its chunks (Note [shim ipc] in ipc_export.h: the shim implements legacy
//   IPC itself), 0 otherwise. One answer differs from cuMemAlloc memory,
//   because the memory really is different: IS_GPU_DIRECT_RDMA_CAPABLE is 0
//   (the chunks are VMM memory created without RDMA support), and attributes that do not apply
//   (HOST_POINTER, P2P_TOKENS) fail with CUDA_ERROR_INVALID_VALUE as for
//   device memory. The driver is never asked: it sees 2 MiB chunk mappings
//   (or nothing, for a chunk not backed yet), not allocations.
//   cuPointerGetAttributes writes every entry: malformed requests (a null
//   data entry, an attribute outside the enumeration) fail before anything is
//   written; an attribute that does not apply, or an address that is not a
//   live allocation, gets the zero value of its whole type.
#ifndef MEMVIRT_SHIM_CORE_POINTER_ATTRIBUTES_H_
#define MEMVIRT_SHIM_CORE_POINTER_ATTRIBUTES_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "memvirt/common/pointer_attribute_table.h"

namespace memvirt::shim {

// What the answers are computed from: one live allocation.
struct AllocationFacts {
  CUcontext context = nullptr;
  int device_ordinal = 0;
  CUdeviceptr base = 0;
  uint64_t bytes = 0;
  unsigned long long buffer_id = 0;
  bool ipc_capable = false;  // legacy IPC available (IS_LEGACY_CUDA_IPC_CAPABLE)
  // Application VMM (Note [application VMM] in shim_core_app_vmm.cc): the
  // reservation holding the mapping (RANGE_START_ADDR / RANGE_SIZE, as the
  // driver documents for VMM memory; base/bytes are the mapping) and the
  // handle types requested at cuMemCreate. Zero range: the allocation's own.
  CUdeviceptr range_base = 0;
  uint64_t range_bytes = 0;
  unsigned long long handle_types = 0;
};

// Attributes passed by the application are read, and zeroed, by the table
// the simulated driver uses too.
using cuda_abi::PointerAttributeBytes;
using cuda_abi::ReadPointerAttribute;

// Writes the value of `attribute` for `ptr` (inside `facts`) to `data`.
// CUDA_ERROR_INVALID_VALUE for a null `data`, an attribute that does not
// apply or one outside the enumeration (nothing written then).
CUresult AnswerPointerAttribute(const AllocationFacts& facts, CUpointer_attribute attribute,
                                void* data, CUdeviceptr ptr);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_POINTER_ATTRIBUTES_H_

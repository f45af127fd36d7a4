// Classic device allocations (cuMemAlloc family and stream-ordered pool allocations) on top of
// a device's AddressSpace and capacity account.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_MEMORY_OPS_H_
#define MEMSIM_SRC_MEMORY_OPS_H_

#include <cstdint>

#include "cuda_api.h"

namespace memsim {

class Context;
class MemPool;

// Charges capacity and maps a read-write range owned by `ctx`. CUDA_ERROR_OUT_OF_MEMORY when
// the device (or node) capacity is exhausted.
CUresult AllocateDeviceMemory(Context* ctx, uint64_t size, MemPool* pool, uint64_t* out);

// Frees a classic allocation starting at `ptr` and returns its capacity.
// CUDA_ERROR_INVALID_VALUE when ptr is not the start of one.
CUresult FreeDeviceMemory(uint64_t ptr);

}  // namespace memsim

#endif  // MEMSIM_SRC_MEMORY_OPS_H_

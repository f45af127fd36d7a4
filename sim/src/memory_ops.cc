#include "memory_ops.h"

#include "context.h"
#include "device.h"
#include "driver.h"
#include "mem_pool.h"

namespace memsim {

CUresult AllocateDeviceMemory(Context* ctx, uint64_t size, MemPool* pool, uint64_t* out) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = ctx->device();
  const uint64_t footprint = AddressSpace::ClassicFootprint(size);
  if (!dev->capacity().TryCharge(footprint)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = dev->va().AllocClassic(size, ctx, pool != nullptr ? pool->handle() : nullptr, out);
  if (r != CUDA_SUCCESS) {
    dev->capacity().Release(footprint);
    return r;
  }
  if (pool != nullptr) pool->Add(footprint);
  return CUDA_SUCCESS;
}

CUresult FreeDeviceMemory(uint64_t ptr) {
  Device* dev = Driver::Get().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t footprint = 0;
  CUmemoryPool pool = nullptr;
  if (CUresult r = dev->va().FreeClassic(ptr, &footprint, &pool)) return r;
  dev->capacity().Release(footprint);
  if (pool != nullptr) {
    if (auto p = Driver::Get().pools.Get(pool)) p->used -= footprint;
  }
  return CUDA_SUCCESS;
}

}  // namespace memsim

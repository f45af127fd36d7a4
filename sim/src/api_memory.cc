// Exported entry points: cuMemAlloc family, memory info, host memory, memory pools.
#include <sys/mman.h>

#include <cstring>

#include "api_common.h"
#include "memory_ops.h"
#include "populate.h"

using memsim::Context;
using memsim::Device;
using memsim::MemPool;
using memsim::Stream;
using memsim::StreamOp;
using namespace memsim::api;

namespace {

CUresult AllocAsync(CUdeviceptr* dptr, size_t bytesize, MemPool* pool_hint, CUstream hStream,
                    bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(hStream, per_thread, &ctx, &stream)) return r;
  // Memory-allocation nodes are not simulated.
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_NOT_SUPPORTED)) return r;
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<MemPool> pool;
  if (pool_hint != nullptr) {
    pool = D().pools.Get(pool_hint);
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
  } else {
    pool = ctx->device()->current_pool();
  }
  if (pool->device() != ctx->device()) return CUDA_ERROR_INVALID_VALUE;
  uint64_t out = 0;
  if (CUresult r = memsim::AllocateDeviceMemory(ctx.get(), bytesize, pool.get(), &out)) return r;
  *dptr = out;
  return CUDA_SUCCESS;
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream hStream, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(hStream, per_thread, &ctx, &stream)) return r;
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_NOT_SUPPORTED)) return r;
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
  Device* dev = D().DeviceForAddress(dptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = dev->va().Lookup(dptr);
  // Memory opened with cuIpcOpenMemHandle is released by cuIpcCloseMemHandle only.
  if (!info || info->kind != memsim::RangeInfo::Kind::kClassic || info->base != dptr ||
      info->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  StreamOp op;
  op.device_work = false;
  op.run = [dptr] { memsim::FreeDeviceMemory(dptr); };
  ctx->Enqueue(stream, std::move(op));
  return ctx->sticky_error();
}

// A page-locked host range owned by `owner`, with a fresh buffer id.
memsim::HostRange MakeHostRange(void* p, size_t size, unsigned int flags, Context* owner,
                                bool registered) {
  memsim::HostRange range;
  range.base = reinterpret_cast<uint64_t>(p);
  range.size = size;
  range.flags = flags;
  range.owner = owner;
  range.registered = registered;
  range.buffer_id = memsim::NextAllocationId();
  return range;
}

CUresult HostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (pp == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t size = (bytesize + memsim::kPageSize - 1) / memsim::kPageSize * memsim::kPageSize;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  // Page-locked memory is resident (Note [committed at allocation]).
  memsim::PopulateRange(reinterpret_cast<uint64_t>(p), size, /*write=*/true);
  D().host_memory.Add(MakeHostRange(p, size, flags, ctx.get(), /*registered=*/false));
  *pp = p;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& cap = ctx->device()->capacity();
  const uint64_t used = cap.Used();
  *total = cap.capacity();
  *free = used >= cap.capacity() ? 0 : cap.capacity() - used;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (CUresult r = ctx->sticky_error()) return r;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t out = 0;
  if (CUresult r = memsim::AllocateDeviceMemory(ctx.get(), bytesize, nullptr, &out)) return r;
  *dptr = out;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  const size_t pitch = (WidthInBytes + 511) / 512 * 512;
  if (CUresult r = cuMemAlloc_v2(dptr, pitch * Height)) return r;
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  if (CUresult r = RequireInit()) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  Device* dev = D().DeviceForAddress(dptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = dev->va().Lookup(dptr);
  // Memory opened with cuIpcOpenMemHandle is released by cuIpcCloseMemHandle only.
  if (!info || info->kind != memsim::RangeInfo::Kind::kClassic || info->base != dptr ||
      info->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // cuMemFree synchronizes: work still queued in the owning context may use the memory.
  if (auto owner = D().contexts.Get(info->owner)) owner->Synchronize();
  return memsim::FreeDeviceMemory(dptr);
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  if (CUresult r = RequireInit()) return r;
  Device* dev = D().DeviceForAddress(dptr);
  std::optional<memsim::RangeInfo> info;
  if (dev != nullptr) info = dev->va().Lookup(dptr);
  if (!info || info->kind == memsim::RangeInfo::Kind::kReserved) {
    auto host = D().host_memory.Lookup(dptr);
    if (!host) return CUDA_ERROR_NOT_FOUND;
    if (pbase != nullptr) *pbase = host->base;
    if (psize != nullptr) *psize = host->size;
    return CUDA_SUCCESS;
  }
  if (pbase != nullptr) *pbase = info->base;
  if (psize != nullptr) *psize = info->size;
  return CUDA_SUCCESS;
}

// --- host memory ----------------------------------------------------------------------------

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return HostAlloc(pp, bytesize, Flags);
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return HostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  if (CUresult r = RequireInit()) return r;
  auto range = D().host_memory.Remove(reinterpret_cast<uint64_t>(p), false);
  if (!range) return CUDA_ERROR_INVALID_VALUE;
  munmap(p, range->size);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned known = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                         CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if ((Flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!D().host_memory.Add(MakeHostRange(p, bytesize, Flags, ctx.get(), /*registered=*/true))) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  if (CUresult r = RequireInit()) return r;
  if (!D().host_memory.Remove(reinterpret_cast<uint64_t>(p), true)) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (CUresult r = RequireInit()) return r;
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!D().host_memory.Lookup(reinterpret_cast<uint64_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);  // unified addressing: the same address
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (CUresult r = RequireInit()) return r;
  auto range = D().host_memory.Lookup(reinterpret_cast<uint64_t>(p));
  if (!range || pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = range->flags;
  return CUDA_SUCCESS;
}

// --- stream-ordered allocation --------------------------------------------------------------

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(dptr, bytesize, nullptr, hStream, false);
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return AllocAsync(dptr, bytesize, nullptr, hStream, true);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, bytesize, reinterpret_cast<MemPool*>(pool), hStream, false);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, bytesize, reinterpret_cast<MemPool*>(pool), hStream, true);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(dptr, hStream, false);
}
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return FreeAsync(dptr, hStream, true);
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  if (CUresult r = RequireInit()) return r;
  if (pool == nullptr || poolProps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Documented for cuMemPoolCreate: HOST_NUMA_CURRENT is not a pool location.
  if (poolProps->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  Device* dev = D().device(poolProps->location.id);
  if (dev == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  auto p = std::make_shared<MemPool>(dev, *poolProps);
  D().pools.Add(p);
  *pool = p->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = RequireInit()) return r;
  auto p = D().pools.Get(pool);
  if (!p || p == p->device()->default_pool()) return CUDA_ERROR_INVALID_VALUE;
  if (p->device()->current_pool() == p) p->device()->set_current_pool(p->device()->default_pool());
  D().pools.Remove(pool);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  (void)minBytesToKeep;
  if (CUresult r = RequireInit()) return r;
  return D().pools.Get(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = RequireInit()) return r;
  auto p = D().pools.Get(pool);
  if (!p || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      p->used_high = p->used.load();  // only resetting to the current value is allowed
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = RequireInit()) return r;
  auto p = D().pools.Get(pool);
  if (!p || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *static_cast<cuuint64_t*>(value) = p->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = 1;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *static_cast<cuuint64_t*>(value) = p->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *static_cast<cuuint64_t*>(value) = p->used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  if (CUresult r = RequireInit()) return r;
  if (!D().pools.Get(pool) || (count > 0 && map == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                                    CUmemLocation* location) {
  if (CUresult r = RequireInit()) return r;
  auto p = D().pools.Get(memPool);
  if (!p || flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return CUDA_SUCCESS;
}

}  // extern "C"

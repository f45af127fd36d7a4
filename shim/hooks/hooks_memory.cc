// Allocation, address queries and the application's own VMM use.
#include "shim/core/log.h"
#include "shim/driver/scoped_context.h"
#include "shim/hooks/hook_util.h"
#include "shim/hooks/hooks_ipc.h"

using memvirt::shim::ScopedContext;
using memvirt::shim::ShimCore;
using memvirt::shim::hooks::DeferFreeOfExported;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::OwnerContext;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;

namespace {

CUresult Alloc(CUdeviceptr* dptr, size_t bytes) {
  if (ShimCore* core = Runtime::Get().CoreForAlloc()) {
    // Note [unsafe calls during capture] in relaxed_capture_mode.h.
    if (const CUresult r = core->CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    return core->Alloc(dptr, bytes);
  }
  return Forward(Real().cuMemAlloc_v2, dptr, bytes);
}

ShimCore* Owner(CUdeviceptr ptr) { return Runtime::Get().OwnerOf(ptr); }

// Note [allocation during capture]
//   On a capturing stream, cuMemAllocAsync and friends record graph memory
//   nodes: every launch of the graph allocates and frees anew. The shim does
//   not virtualize that: such allocations go to the driver. A shim block
//   freed on a capturing stream is referenced by the graph being built (the
//   free happens at its launches), so it is never reused: it stays allocated.
ShimCore* AsyncAllocator(CUstream stream, bool per_thread) {
  ShimCore* core = Runtime::Get().CoreForAlloc();
  return core != nullptr && !core->StreamCapturing(stream, per_thread) ? core : nullptr;
}

CUresult Free(ShimCore* core, CUdeviceptr ptr) {
  ScopedContext scoped = OwnerContext(core);
  return core->Free(ptr);
}

// A block of another device than the stream's: that core cannot order the
// free after the stream (its events live in its own context), so the host
// waits for the stream first and frees at once.
CUresult FreeAsync(ShimCore* core, CUdeviceptr ptr, CUstream stream, bool per_thread) {
  if (DeferFreeOfExported(core, ptr)) return CUDA_SUCCESS;  // Note [shim ipc]
  const Runtime& runtime = Runtime::Get();
  if (!runtime.single_core() && runtime.core() != core) {
    if (stream == nullptr) stream = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    CUresult r = runtime.driver()->cuStreamSynchronize(stream);
    return r == CUDA_SUCCESS ? Free(core, ptr) : r;
  }
  if (!core->StreamCapturing(stream, per_thread)) return core->FreeAsync(ptr, stream, per_thread);
  MEMSHIM_LOG(kInfo, "block %p freed during stream capture is kept allocated",
              reinterpret_cast<void*>(ptr));
  return CUDA_SUCCESS;
}

}  // namespace

MEMSHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  return Alloc(dptr, bytes);
}

MEMSHIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                           size_t height, unsigned int element_bytes) {
  if (ShimCore* core = Runtime::Get().CoreForAlloc()) {
    if (const CUresult r = core->CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    return core->AllocPitch(dptr, pitch, width, height, element_bytes);
  }
  return Forward(Real().cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
}

MEMSHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  if (ShimCore* core = Owner(ptr)) {
    if (const CUresult r = core->CheckUnsafeCall(); r != CUDA_SUCCESS) return r;
    if (DeferFreeOfExported(core, ptr)) return CUDA_SUCCESS;  // Note [shim ipc]
    return Free(core, ptr);
  }
  return Forward(Real().cuMemFree_v2, ptr);
}

// Note [stream-ordered allocation]
//   Blocks handed out by cuMemAllocAsync are valid immediately (a stricter
//   guarantee than stream order); memory pools are not modelled: a pool's
//   attributes are ignored and its blocks come from the shim's reservation.
MEMSHIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  if (ShimCore* core = AsyncAllocator(stream, false)) return core->Alloc(dptr, bytes);
  return Forward(Real().cuMemAllocAsync, dptr, bytes, stream);
}

MEMSHIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  if (ShimCore* core = AsyncAllocator(stream, true)) return core->Alloc(dptr, bytes);
  return Forward(Real().cuMemAllocAsync_ptsz, dptr, bytes, stream);
}

MEMSHIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool,
                                                CUstream stream) {
  if (ShimCore* core = AsyncAllocator(stream, false)) return core->Alloc(dptr, bytes);
  return Forward(Real().cuMemAllocFromPoolAsync, dptr, bytes, pool, stream);
}

MEMSHIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes,
                                                     CUmemoryPool pool, CUstream stream) {
  if (ShimCore* core = AsyncAllocator(stream, true)) return core->Alloc(dptr, bytes);
  return Forward(Real().cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, stream);
}

MEMSHIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  if (ShimCore* core = Owner(ptr)) return FreeAsync(core, ptr, stream, false);
  return Forward(Real().cuMemFreeAsync, ptr, stream);
}

MEMSHIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  if (ShimCore* core = Owner(ptr)) return FreeAsync(core, ptr, stream, true);
  return Forward(Real().cuMemFreeAsync_ptsz, ptr, stream);
}

MEMSHIM_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (ShimCore* core = Runtime::Get().CoreForAlloc()) return core->GetInfo(free, total);
  return Forward(Real().cuMemGetInfo_v2, free, total);
}

// Queries on an address in the reservation that the core does not know may
// be about the driver's own mapping in a range the application reserved
// there (Note [application VMM] in shim/core/shim_core_app_vmm.cc): those go
// to the driver.
MEMSHIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  if (ShimCore* core = Owner(ptr)) {
    const CUresult r = core->GetAddressRange(base, size, ptr);
    if (r != CUDA_ERROR_NOT_FOUND || !core->IsForeign(ptr, 1)) return r;
  }
  return Forward(Real().cuMemGetAddressRange_v2, base, size, ptr);
}

MEMSHIM_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                              CUdeviceptr ptr) {
  if (ShimCore* core = Owner(ptr); core != nullptr && !core->IsForeign(ptr, 1)) {
    return core->PointerAttribute(attribute, data, ptr);
  }
  return Forward(Real().cuPointerGetAttribute, data, attribute, ptr);
}

MEMSHIM_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes,
                                               void** data, CUdeviceptr ptr) {
  if (ShimCore* core = Owner(ptr); core != nullptr && !core->IsForeign(ptr, 1)) {
    return core->PointerAttributes(count, attributes, data, ptr);
  }
  return Forward(Real().cuPointerGetAttributes, count, attributes, data, ptr);
}

// Helpers shared by the exported entry points (api_*.cc): initialization checks and handle
// resolution with the error codes the CUDA documentation specifies.
//
// Thread safety: all helpers are thread-safe; they only read the calling thread's context stack.
#ifndef MEMSIM_SRC_API_COMMON_H_
#define MEMSIM_SRC_API_COMMON_H_

#include <memory>

#include "cuda_api.h"
#include "driver.h"

namespace memsim::api {

inline Driver& D() { return Driver::Get(); }

inline CUresult RequireInit() {
  return D().initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// The calling thread's current context. NOT_INITIALIZED before cuInit, INVALID_CONTEXT when
// there is none (or it was destroyed).
CUresult CurrentContext(std::shared_ptr<Context>* out);

// Resolves a stream handle: NULL means the legacy default stream, or the per-thread default
// stream when `per_thread` (the _ptsz/_ptds entry points); CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD are honoured explicitly. Sets the stream's context.
CUresult ResolveStream(CUstream handle, bool per_thread, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream);

// Like ResolveStream, then returns the context's sticky error if it has one.
CUresult ResolveStreamForWork(CUstream handle, bool per_thread, std::shared_ptr<Context>* ctx,
                              std::shared_ptr<Stream>* stream);

// CUDA_ERROR_INVALID_DEVICE for ordinals that do not exist.
CUresult ResolveDevice(CUdevice ordinal, Device** out);

// Destroys a context: waits for and stops its streams, drops its streams/events from the
// handle tables and frees its cuMemAlloc/host allocations.
void DestroyContext(const std::shared_ptr<Context>& ctx);

}  // namespace memsim::api

#endif  // MEMSIM_SRC_API_COMMON_H_

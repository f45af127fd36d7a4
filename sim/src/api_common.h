// Helpers shared by the exported entry points (api_*.cc): initialization checks and handle
// resolution with the error codes the CUDA documentation specifies.
//
// Thread safety: all helpers are thread-safe; they only read the calling thread's context stack.
#ifndef MEMSIM_SRC_API_COMMON_H_
#define MEMSIM_SRC_API_COMMON_H_

#include <memory>

#include "capture_mode.h"
#include "cuda_api.h"
#include "driver.h"

namespace memsim::api {

inline Driver& D() { return Driver::Get(); }

// The address one side of a copy descriptor names: its host pointer for
// CU_MEMORYTYPE_HOST, else its device pointer (unified addressing).
inline uint64_t CopyEndpoint(CUmemorytype type, const void* host, CUdeviceptr device) {
  return type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uint64_t>(host)
                                    : static_cast<uint64_t>(device);
}

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

// Like ResolveStream, then returns the context's sticky error if it has one, and
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy stream during a blocking capture
// (CheckLegacyUse with `invalidate`).
CUresult ResolveStreamForWork(CUstream handle, bool per_thread, std::shared_ptr<Context>* ctx,
                              std::shared_ptr<Stream>* stream);

// Note [capture and the legacy stream]: while a blocking stream of the context is capturing,
// the legacy default stream is unusable, since work on it would implicitly depend on the
// capture: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT. With `invalidate` (work submitted, or a
// synchronization) those captures are invalidated; queries leave them alone, as documented for
// cuStreamIsCapturing.
CUresult CheckLegacyUse(Context& ctx, const Stream& stream, bool invalidate);

// For operations that may not run on a capturing stream: if `stream` is capturing, invalidates
// the capture and returns `error`; CUDA_SUCCESS otherwise.
CUresult RefuseDuringCapture(Stream& stream, CUresult error);

// The capture status of `stream` (cuStreamIsCapturing).
CUstreamCaptureStatus CaptureStatus(Stream& stream);

// Ends the capture of a stream that is being destroyed, or whose capture ended without a graph:
// the capture graph is destroyed and the joined streams leave it. A joined stream (Note
// [cross-stream capture] in graph.h) only leaves the capture, which it invalidates.
void AbandonCapture(Context& ctx, Stream& stream);

// Takes the streams that joined `capture` out of capture mode (the capture ends).
void LeaveJoinedStreams(Context& ctx, Capture& capture);

// Resolves a CUfunction or a CUkernel cast to CUfunction (what launches and occupancy calls
// accept; Note [kernel handles] in module.h). CUDA_ERROR_INVALID_HANDLE for anything else.
CUresult ResolveFunction(const void* handle, Function** fn, std::shared_ptr<Module>* module);
// Resolves only handles of `kind` (cuFunc* calls: kFunction, cuKernel* calls: kKernel).
CUresult ResolveFunctionOfKind(const void* handle, Driver::FunctionHandleKind kind, Function** fn,
                               std::shared_ptr<Module>* module);

// CUDA_ERROR_INVALID_DEVICE for ordinals that do not exist.
CUresult ResolveDevice(CUdevice ordinal, Device** out);

// Destroys a context: runs its context-local storage destructors (export_tables.h), removes it
// from the handle table, waits for and stops its streams, drops its streams/events from the
// handle tables and frees its cuMemAlloc/host allocations.
void DestroyContext(const std::shared_ptr<Context>& ctx);
// The same for a primary context whose last reference went (release or reset), except that its
// handle stays valid: the context is Reset() and can be retained again.
void DeactivatePrimaryContext(const std::shared_ptr<Context>& ctx);

}  // namespace memsim::api

#endif  // MEMSIM_SRC_API_COMMON_H_

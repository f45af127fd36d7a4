// Stream-capture interaction modes: which "potentially unsafe" API calls are prohibited while
// captures are in progress (cuStreamBeginCapture, cuThreadExchangeStreamCaptureMode).
//
// Note [capture modes]: per the documentation of cuThreadExchangeStreamCaptureMode, a thread
// whose mode is
//   - GLOBAL (the default) may make no potentially unsafe call while it has a capture of its own
//     that was not begun RELAXED, or while any other thread has a capture begun GLOBAL;
//   - THREAD_LOCAL may make none while it has a capture of its own not begun RELAXED;
//   - RELAXED is never prohibited.
// A prohibited call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the
// captures that prohibited it (cuStreamEndCapture then returns
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). The sim treats as potentially unsafe: cuMemAlloc
// (and cuMemAllocPitch), cuMemFree, cuCtxSynchronize, cuStreamQuery, cuEventQuery and the
// synchronous copies and memsets. "A capture of its own" is one begun by that thread.
//
// Thread safety: thread-safe. The mode is per thread; the registry of captures in progress is
// process-wide (one mutex; an atomic count keeps the no-capture path lock-free).
#ifndef MEMSIM_SRC_CAPTURE_MODE_H_
#define MEMSIM_SRC_CAPTURE_MODE_H_

#include <memory>

#include "cuda_api.h"

namespace memsim {

class Capture;

// The calling thread's interaction mode (cuThreadExchangeStreamCaptureMode).
CUstreamCaptureMode& ThreadCaptureMode();

// A capture is in progress from Register until Unregister (Stream::StartCapture / EndCapture).
void RegisterCapture(const std::shared_ptr<Capture>& capture);
void UnregisterCapture(const Capture* capture);

// For a potentially unsafe call: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (after invalidating the
// prohibiting captures) when the calling thread's mode prohibits it now, else CUDA_SUCCESS.
CUresult CheckUnsafeCall();

}  // namespace memsim

#endif  // MEMSIM_SRC_CAPTURE_MODE_H_

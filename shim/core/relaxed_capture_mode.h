// A scope in which the calling thread's stream-capture interaction mode is
// CU_STREAM_CAPTURE_MODE_RELAXED (cuThreadExchangeStreamCaptureMode).
//
// Note [relaxed driver sequences]
//   The shim issues driver calls of its own from the application's threads
//   (event records and queries, stream waits, host waits for its fills and
//   page-outs), also while the application captures a stream, possibly in
//   the default GLOBAL mode on another thread (CUDA graphs,
//   torch.cuda.graph). In GLOBAL mode the driver refuses "potentially
//   unsafe" calls (cuEventQuery among them) with
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the application's
//   capture. None of the shim's own calls is recorded into a capture (the
//   captured stream is covered when its capture begins and nothing is
//   recorded on it meanwhile), so each such sequence runs in RELAXED mode,
//   which the driver never prohibits; the thread's mode is put back after it.
//   Host waits among them (cuEventSynchronize, cuStreamSynchronize) are of
//   events the shim recorded outside any capture, on streams that were not
//   capturing then: in RELAXED mode the driver prohibits only calls that
//   "necessarily conflict with stream capture" (cuThreadExchangeStreamCaptureMode:
//   its example is a query of an event last recorded inside a capture),
//   which these are not, so they are allowed while another thread captures
//   in GLOBAL mode, and nothing of them enters or invalidates the capture.
//   During a capture of the waiting thread's own stream the shim does not
//   wait on that stream (it records nothing there; its fills are awaited on
//   the copy stream's events).
//
// Note [unsafe calls during capture]
//   The application's own potentially unsafe calls keep the driver's rules
//   under the shim, although the shim serves them without the driver:
//   cuMemAlloc, cuMemAllocPitch and cuMemFree of shim memory return
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED where the driver's would (a
//   GLOBAL-mode thread while another thread captures in GLOBAL mode, or
//   while it captures itself in a mode other than RELAXED), and the driver
//   invalidates the captures that prohibited the call, as it would have. The
//   decision is the driver's: ShimCore::CheckUnsafeCall asks cuEventQuery
//   (a potentially unsafe call under the same rule) of a never-recorded
//   event in the caller's own mode; CUDA_SUCCESS means the call is allowed,
//   and only CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED refuses it.
//
// Thread safety: the mode is per thread; a scope is used by one thread.
#ifndef MEMVIRT_SHIM_CORE_RELAXED_CAPTURE_MODE_H_
#define MEMVIRT_SHIM_CORE_RELAXED_CAPTURE_MODE_H_

#include <cuda.h>

#include "shim/driver/driver.h"

namespace memvirt::shim {

class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const Driver* driver) : driver_(driver) {
    if (driver_->cuThreadExchangeStreamCaptureMode != nullptr) {
      swapped_ = driver_->cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
    }
  }
  ~RelaxedCaptureMode() {
    if (swapped_) driver_->cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const Driver* const driver_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool swapped_ = false;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_RELAXED_CAPTURE_MODE_H_

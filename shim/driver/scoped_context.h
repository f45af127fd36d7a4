// ScopedContext: makes a context current for a scope, and puts the caller's
// back (cuCtxPushCurrent/cuCtxPopCurrent) when it was another one.
//
// Note [foreign threads]
//   Most core entry points run on the application's thread, inside the call
//   it made, with the core's context current. Some are not: SetDeviceBudget
//   may be called from a control-plane thread with no context, and in a
//   process with several devices a free, query or copy reaches the core that
//   owns its address while another device's context is current (Note [core
//   routing] in shim/hooks/runtime.h). Those make the core's context current
//   for their duration, so that the core's events and streams are used in
//   their own context and the caller's context is kept.
//
// Thread safety: the current context is per thread; so is this object.
#ifndef MEMVIRT_SHIM_DRIVER_SCOPED_CONTEXT_H_
#define MEMVIRT_SHIM_DRIVER_SCOPED_CONTEXT_H_

#include <cuda.h>

#include "shim/driver/driver.h"

namespace memvirt::shim {

class ScopedContext {
 public:
  // A null `context` leaves the current context alone (nothing is asked).
  ScopedContext(const Driver* driver, CUcontext context) : driver_(driver) {
    CUcontext current = nullptr;
    if (context == nullptr || driver->cuCtxPushCurrent_v2 == nullptr ||
        driver->cuCtxPopCurrent_v2 == nullptr ||
        driver->cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == context) {
      return;
    }
    pushed_ = driver->cuCtxPushCurrent_v2(context) == CUDA_SUCCESS;
  }
  ~ScopedContext() {
    CUcontext popped;
    if (pushed_) driver_->cuCtxPopCurrent_v2(&popped);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const Driver* const driver_;
  bool pushed_ = false;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_DRIVER_SCOPED_CONTEXT_H_

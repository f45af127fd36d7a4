// Makes a context current for a scope (push/pop), for work a core does on
// a thread that may have none.
//
// Thread safety: affects the calling thread only.
#ifndef MEMVIRT_SHIM_CORE_SCOPED_CONTEXT_H_
#define MEMVIRT_SHIM_CORE_SCOPED_CONTEXT_H_

#include <cuda.h>

#include "shim/driver/driver.h"

namespace memvirt::shim {

// Note [foreign threads]
//   Most entry points run on the application's thread, inside the call it
//   made, with the core's context current. SetDeviceBudget may be called from
//   a control-plane thread with no context, and the IPC exporter's listener
//   thread pins and frees blocks (ipc_export.h): they make the core's context
//   current for the duration (push/pop, so a caller's own context is kept).
class ScopedContext {
 public:
  ScopedContext(const Driver* driver, CUcontext context) : driver_(driver) {
    CUcontext current = nullptr;
    if (driver->cuCtxPushCurrent_v2 == nullptr || driver->cuCtxPopCurrent_v2 == nullptr ||
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

#endif  // MEMVIRT_SHIM_CORE_SCOPED_CONTEXT_H_

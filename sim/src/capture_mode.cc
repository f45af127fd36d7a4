#include "capture_mode.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "graph.h"
#include "memvirt/common/mutex.h"

namespace memsim {

namespace {

thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

struct Registry {
  memvirt::sync::Mutex mu;
  std::vector<std::shared_ptr<Capture>> active MEMVIRT_GUARDED_BY(mu);
  std::atomic<int> count{0};
};

Registry& Captures() {
  static Registry* registry = new Registry;  // never destroyed (Note [never destroyed])
  return *registry;
}

}  // namespace

CUstreamCaptureMode& ThreadCaptureMode() { return t_mode; }

void RegisterCapture(const std::shared_ptr<Capture>& capture) {
  Registry& r = Captures();
  memvirt::sync::MutexLock lock(&r.mu);
  r.active.push_back(capture);
  r.count.store(static_cast<int>(r.active.size()), std::memory_order_release);
}

void UnregisterCapture(const Capture* capture) {
  Registry& r = Captures();
  memvirt::sync::MutexLock lock(&r.mu);
  r.active.erase(std::remove_if(r.active.begin(), r.active.end(),
                                [capture](const auto& c) { return c.get() == capture; }),
                 r.active.end());
  r.count.store(static_cast<int>(r.active.size()), std::memory_order_release);
}

CUresult CheckUnsafeCall() {
  Registry& r = Captures();
  if (r.count.load(std::memory_order_acquire) == 0) return CUDA_SUCCESS;
  const CUstreamCaptureMode mode = t_mode;
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const std::thread::id self = std::this_thread::get_id();
  std::vector<std::shared_ptr<Capture>> prohibiting;
  {
    memvirt::sync::MutexLock lock(&r.mu);
    for (const auto& c : r.active) {
      const bool own = c->thread() == self && c->mode() != CU_STREAM_CAPTURE_MODE_RELAXED;
      const bool other_global = mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->thread() != self &&
                                c->mode() == CU_STREAM_CAPTURE_MODE_GLOBAL;
      if (own || other_global) prohibiting.push_back(c);
    }
  }
  for (const auto& c : prohibiting) c->Invalidate();
  return prohibiting.empty() ? CUDA_SUCCESS : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

}  // namespace memsim

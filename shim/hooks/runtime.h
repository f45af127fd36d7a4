// The process-wide state behind the exported hooks: configuration, the real
// driver's entry points, and the ShimCore (created on first use).
//
// Thread safety: Get() is thread-safe and initializes once; a call made on
// the initializing thread while it initializes (the real libcuda calling
// back into the shim) sees a runtime that is not ready() and passes through.
// core() is a lock-free read.
//
// Note [lazy initialization]
//   Nothing happens at load time: the first intercepted call loads the real
//   libcuda.so.1 (dlopen RTLD_NOW|RTLD_LOCAL, so the app's own load order is
//   untouched) and resolves every entry point; the core is created on the
//   first allocation (or cuMemGetInfo), in the context current at that
//   moment. A failure leaves the shim in pass-through mode with one log line.
#ifndef MEMVIRT_SHIM_HOOKS_RUNTIME_H_
#define MEMVIRT_SHIM_HOOKS_RUNTIME_H_

#include <cuda.h>

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "shim/core/config.h"
#include "shim/core/control_plane.h"
#include "shim/core/shim_core.h"
#include "shim/core/thread_annotations.h"
#include "shim/driver/driver.h"
#include "shim/hooks/hook_list.h"

namespace memvirt::shim::hooks {

// The real driver's entry point for every hooked name.
struct RealFunctions {
#define MEMSHIM_REAL_MEMBER(name) decltype(&::name) name = nullptr;
  MEMSHIM_HOOKED_FUNCTIONS(MEMSHIM_REAL_MEMBER)
#undef MEMSHIM_REAL_MEMBER
};

class Runtime {
 public:
  static Runtime& Get();

  bool ready() const { return ready_.load(std::memory_order_acquire); }
  bool disabled() const { return config_.disabled; }
  const RealFunctions& real() const { return real_; }
  // The driver table the core uses; null if the real driver lacks entry
  // points the core requires.
  const Driver* driver() const { return driver_ok_ ? &driver_ : nullptr; }

  // The core if it exists (null while disabled, before the first allocation,
  // or after a failed creation).
  ShimCore* core() const { return core_.load(std::memory_order_acquire); }
  // The core, creating it in the current context if needed.
  ShimCore* CoreForAlloc();

  // The hook to hand out for a real entry point returned by the driver's
  // cuGetProcAddress or by dlsym on libcuda; `real` itself if not hooked.
  void* Substitute(void* real) const;
  // cuGetProcAddress answers: the hook of the flavour the table names for
  // (symbol, version, per-thread flag), see Note [entry-point substitution]
  // in hooks_lookup.cc.
  void* SubstituteProc(const char* symbol, void* real, int version, cuuint64_t flags) const;

 private:
  Runtime() = default;
  void Initialize();

  std::atomic<bool> ready_{false};
  ShimConfig config_;
  void* libcuda_ = nullptr;
  RealFunctions real_;
  Driver driver_;
  bool driver_ok_ = false;
  std::unordered_map<void*, void*> hook_of_real_;
  std::unordered_map<std::string, void*> hook_of_flavour_;  // every hook, by its exported name
  StandaloneControlPlane standalone_;
  std::string daemon_socket_;
  Mutex create_mu_;  // held while the core is created
  // standalone_ or the daemon link.
  ControlPlane* control_ MEMSHIM_GUARDED_BY(create_mu_) = nullptr;
  std::atomic<ShimCore*> core_{nullptr};
  std::atomic<bool> creation_failed_{false};
};

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_RUNTIME_H_

// The process-wide state behind the exported hooks: configuration, the real
// driver's entry points, and the ShimCore (created on first use).
//
// Thread safety: Get() is thread-safe and initializes once; a call made on
// the initializing thread while it initializes (the real libcuda calling
// back into the shim) sees a runtime that is not ready() and passes through.
// core(), OwnerOf() and ForEachCore() read without a lock.
//
// Note [lazy initialization]
//   Nothing happens at load time: the first intercepted call loads the real
//   libcuda.so.1 (dlopen RTLD_NOW|RTLD_LOCAL, so the app's own load order is
//   untouched) and resolves every entry point; a device's core is created on
//   the first allocation (or cuMemGetInfo) made while one of that device's
//   contexts is current, in that context. A failure leaves the shim in
//   pass-through mode with one log line.
//
// Note [core routing]
//   One core per device (Note [one core per device] in shim_core.h).
//   * Allocations, cuMemGetInfo and the application's cuMemCreate go to the
//     current context's device (cuCtxGetDevice), creating its core.
//   * Frees, address and pointer queries go to the core whose reservation
//     holds the address (OwnerOf: one subtract-and-compare per core), with
//     that core's context current while it runs (Note [foreign threads] in
//     shim/driver/scoped_context.h).
//   * Launches, graph launches, copies and memsets are issued in the current
//     context: core() is that context's device's core. A copy side in
//     another device's reservation is made resident by its own core too
//     (Note [cross-device copies] in cross_device.h).
//   The cost on the launch path: while the process has exactly one core and
//   the driver reports one device, core() is that core (one atomic load, no
//   driver call, as before cores were per device); otherwise core() asks
//   cuCtxGetDevice once per call and indexes a per-device array.
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

  // The core of the current context's device if it exists (null while
  // disabled, before that device's first allocation, or after a failed
  // creation). Note [core routing].
  ShimCore* core() const {
    if (ShimCore* only = only_core()) return only;
    return num_cores_.load(std::memory_order_acquire) == 0 ? nullptr : CoreOfCurrentDevice();
  }
  // The core of the current context's device, creating it in the current
  // context if needed.
  ShimCore* CoreForAlloc();
  // The core of `device` if it exists.
  ShimCore* CoreOfDevice(CUdevice device) const {
    return device >= 0 && device < kMaxDevices ? by_device_[device].load(std::memory_order_acquire)
                                               : nullptr;
  }
  // The core whose reservation holds `ptr`, or null.
  ShimCore* OwnerOf(CUdeviceptr ptr) const {
    const int n = num_cores_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      ShimCore* core = cores_[i].load(std::memory_order_relaxed);  // published by num_cores_
      if (core->Owns(ptr)) return core;
    }
    return nullptr;
  }
  // Calls `fn(ShimCore*)` for every core, in creation order.
  template <typename Fn>
  void ForEachCore(Fn fn) const {
    const int n = num_cores_.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) fn(cores_[i].load(std::memory_order_relaxed));
  }
  // The only core while core() answers without asking the driver (one core,
  // one device; Note [core routing]), else null.
  ShimCore* only_core() const { return only_core_.load(std::memory_order_acquire); }
  bool single_core() const { return only_core() != nullptr; }

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
  // The process's host budget, shared by every device's core (Note [shared
  // host budget] in shim/core/host_ledger.h).
  HostLedger host_ledger_;
  // What every core committed beyond its device budget, against that host
  // budget and the spill capacity (Note [shared admission] in
  // shim/core/overflow_ledger.h).
  OverflowLedger overflow_ledger_{&host_ledger_};
  // Every core, for a core that finds the host ledger held by the others
  // (Note [host slots of other cores] in shim/core/host_peers.h).
  class PeerCores final : public HostPeers {
   public:
    explicit PeerCores(const Runtime* runtime) : runtime_(runtime) {}
    uint64_t ReclaimHostFromPeers(const ShimCore* asker, uint64_t bytes) override;
    bool ReleasePeerFrees(const ShimCore* asker) override;

   private:
    const Runtime* const runtime_;
  };
  PeerCores peer_cores_{this};
  std::string daemon_socket_;
  Mutex create_mu_;  // held while a core is created
  // standalone_ or the daemon link.
  ControlPlane* control_ MEMSHIM_GUARDED_BY(create_mu_) = nullptr;
  ShimCore* CoreOfCurrentDevice() const;
  // The control plane of a new core on `device` (Note [per-device budgets]
  // in runtime.cc).
  ControlPlane* ControlFor(CUdevice device) MEMSHIM_REQUIRES(create_mu_);

  // Devices (ordinals) a process may have cores for; the simulated driver has
  // at most 16, the daemon protocol accepts 16 GPUs per client.
  static constexpr int kMaxDevices = 64;
  std::atomic<ShimCore*> by_device_[kMaxDevices] = {};
  std::atomic<ShimCore*> cores_[kMaxDevices] = {};  // creation order; [0, num_cores_) set
  std::atomic<int> num_cores_{0};
  // The only core, while there is one and the driver reports one device.
  std::atomic<ShimCore*> only_core_{nullptr};
  std::atomic<bool> creation_failed_[kMaxDevices] = {};
};

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_RUNTIME_H_

// The shim's link to a node-level arbiter (the memvirt daemon): budget
// directives in, usage and allocation hints out. The standalone
// implementation answers from the local configuration; the daemon link
// (shim/daemon_link/, loaded as a plugin) implements the same interface over
// the memvirt client library without touching the core.
//
// Thread safety: implementations must be thread-safe. ShimCore calls them
// without holding its own lock, from any application thread. Callbacks given
// to a ControlPlane may be invoked from the control plane's own threads, at
// any time once registered (even before the registering call returns) and
// while the control plane holds its own locks; they must not call back into
// the ControlPlane.
//
// Lock order: a ControlPlane's locks before ShimCore's. The core therefore
// never calls a ControlPlane method, registering or removing callbacks
// included, while it holds its lock (shim_core.h).
#ifndef MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_
#define MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shim/core/spill_tier.h"

namespace memvirt::shim {

// The device a core virtualizes, as the driver reports it.
struct DeviceIdentity {
  std::string uuid;          // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; empty if unknown.
  uint64_t total_bytes = 0;  // The device's memory (cuMemGetInfo total).
};

// One allocation or free, for the daemon's lifetime hints.
struct AllocEvent {
  uint64_t alloc_id = 0;  // Unique among live allocations (an id may be reused after a free).
  uint64_t bytes = 0;
  bool freed = false;
};

struct UsageReport {
  uint64_t device_resident_bytes = 0;    // Device chunks backing the reservation.
  uint64_t device_budget_bytes = 0;      // Budget in force now.
  uint64_t host_resident_bytes = 0;      // Host-tier slots in use.
  uint64_t allocated_bytes = 0;          // Live allocations.
  uint64_t page_in_bytes = 0;            // Cumulative host -> device.
  uint64_t page_out_bytes = 0;           // Cumulative device -> host.
  uint64_t nvme_resident_bytes = 0;      // Chunks held in the spill tier now.
  uint64_t nvme_write_bytes = 0;         // Cumulative host -> spill tier.
  uint64_t nvme_read_bytes = 0;          // Cumulative spill tier -> host/device.
  uint64_t launches = 0;                 // Cumulative intercepted launches.
  uint64_t dropped_alloc_events = 0;     // Cumulative events lost to the bounded log.
  std::vector<AllocEvent> alloc_events;  // Since the previous report, oldest first.
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // Device bytes this process may keep resident on `device`. `local_default`
  // is what the shim would use on its own (MEMSHIM_DEVICE_BUDGET or 90% of
  // free). May block for a bounded time (registration with the daemon).
  virtual uint64_t InitialDeviceBudget(const DeviceIdentity& device, uint64_t local_default) = 0;
  // Host-tier bytes this process may use. REQUIRES: after InitialDeviceBudget.
  virtual uint64_t InitialHostBudget(uint64_t local_default) = 0;
  // Registers (or, with an empty function, removes) the callback for later
  // device budget changes. Once this returns with an empty function the old
  // callback is no longer running and will not run again.
  virtual void OnBudgetChange(std::function<void(uint64_t device_bytes)> callback) = 0;
  // Registers (or removes, as above) the function the control plane polls for
  // usage reports on its own schedule. Each call of `source` drains the
  // allocation events gathered since the previous call.
  virtual void SetUsageSource(std::function<UsageReport()> source) = 0;
  // The tier below host memory, or null if there is none. Owned by the
  // control plane and valid until it is destroyed. REQUIRES: after
  // InitialHostBudget; called once, by the core, at creation.
  virtual SpillTier* spill_tier() { return nullptr; }
  // Registers (or, with empty functions, removes; same contract as
  // OnBudgetChange) how the daemon's host-tier directives reach the core:
  // `set_budget` for a new host budget, `demote` to move bytes to the spill
  // tier (returns the bytes moved).
  struct HostTierControl {
    std::function<void(uint64_t bytes)> set_budget;
    std::function<uint64_t(uint64_t bytes)> demote;
  };
  virtual void OnHostTierControl(HostTierControl /*control*/) {}
  // The control plane the core of device `ordinal` uses: each core calls the
  // methods above on its own, InitialDeviceBudget first (Note [per-device
  // budgets] in shim/hooks/runtime.cc). Owned by this one and valid as long
  // as it. The default serves every device with this one (budgets that do not
  // depend on the device).
  virtual ControlPlane* ForDevice(int /*ordinal*/) { return this; }
};

// No daemon: budgets are the local defaults and never change.
class StandaloneControlPlane : public ControlPlane {
 public:
  uint64_t InitialDeviceBudget(const DeviceIdentity&, uint64_t local_default) override {
    return local_default;
  }
  uint64_t InitialHostBudget(uint64_t local_default) override { return local_default; }
  void OnBudgetChange(std::function<void(uint64_t)>) override {}
  void SetUsageSource(std::function<UsageReport()>) override {}
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_

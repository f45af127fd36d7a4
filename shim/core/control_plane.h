// The shim's link to a node-level arbiter (the memvirt daemon): budget
// directives in, usage and hints out. The standalone implementation answers
// from the local configuration; a daemon client implements the same
// interface over gRPC (daemon issue) without touching the core.
//
// Thread safety: implementations must be thread-safe; ShimCore calls them
// without holding its own lock, from any application thread.
#ifndef MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_
#define MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_

#include <cstdint>
#include <functional>

namespace memvirt::shim {

struct UsageReport {
  uint64_t device_resident_bytes = 0;
  uint64_t host_resident_bytes = 0;
  uint64_t allocated_bytes = 0;
  uint64_t page_in_bytes = 0;
  uint64_t page_out_bytes = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // Device bytes this process may keep resident. `local_default` is what the
  // shim would use on its own (MEMSHIM_DEVICE_BUDGET or 90% of free).
  virtual uint64_t InitialDeviceBudget(uint64_t local_default) = 0;
  // Host-tier bytes this process may use.
  virtual uint64_t InitialHostBudget(uint64_t local_default) = 0;
  // Registers a callback for later budget changes (may never be called).
  virtual void OnBudgetChange(std::function<void(uint64_t device_bytes)> callback) = 0;
  // Periodic usage report (best effort; may be dropped).
  virtual void Report(const UsageReport& usage) = 0;
};

// No daemon: budgets are the local defaults and never change.
class StandaloneControlPlane : public ControlPlane {
 public:
  uint64_t InitialDeviceBudget(uint64_t local_default) override { return local_default; }
  uint64_t InitialHostBudget(uint64_t local_default) override { return local_default; }
  void OnBudgetChange(std::function<void(uint64_t)>) override {}
  void Report(const UsageReport&) override {}
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CONTROL_PLANE_H_

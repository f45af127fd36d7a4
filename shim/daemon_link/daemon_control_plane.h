// DaemonControlPlane: the shim's ControlPlane over the memvirt client library.
//
// Registers the process's devices with memvirtd (the first device's core
// registers the process, each further device's core adds its GPU to the
// registration: Note [several devices] in daemon_control_plane.cc), returns
// the granted budgets, applies budget directives through the callback of the
// core of the directive's GPU and acknowledges them, and reports usage per GPU
// and allocation hints every report interval (one batch per interval, never
// one message per CUDA call). While the daemon is
// absent or gone the process keeps the budget it last had (standalone) and
// the client reconnects in the background; a restarted daemon re-learns the
// process from its registration and the next report.
//
// Thread safety: all public methods are thread-safe. One worker thread
// applies directives and sends reports; the budget callback and the usage
// source run on it, one at a time, never under this object's state lock.
//
// Lock order: callback_mu_ or source_mu_ (never both), then whatever the
// callback or source takes (ShimCore's mutex). mu_ is a leaf: nothing is
// called out while it is held.
#ifndef MEMVIRT_SHIM_DAEMON_LINK_DAEMON_CONTROL_PLANE_H_
#define MEMVIRT_SHIM_DAEMON_LINK_DAEMON_CONTROL_PLANE_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "memvirt/client.h"
#include "shim/core/control_plane.h"
#include "shim/core/thread_annotations.h"
#include "shim/daemon_link/daemon_link_abi.h"
#include "shim/daemon_link/tier_channel.h"

namespace memvirt::shim {

// MEMSHIM_TIER_DEADLINE_MS (default 60000, at least 1): how long a tier
// request waits for a daemon that is still connected but slow (Note [slow or
// gone] in tier_channel.cc). Invalid values are logged and the default is used.
std::chrono::milliseconds TierDeadlineFromEnvironment();
// MEMSHIM_ADMISSION_WAIT_MS (default 30000): how long registration waits for
// a usable device budget (Note [admission] in daemon_control_plane.cc).
std::chrono::milliseconds AdmissionWaitFromEnvironment();
// A millisecond count from environment variable `name` (0..86400000), else
// `fallback` (an invalid value is logged).
std::chrono::milliseconds MillisecondsFromEnvironment(const char* name,
                                                      std::chrono::milliseconds fallback);

class DaemonControlPlane final : public ControlPlane {
 public:
  using ClientFactory = std::function<std::unique_ptr<client::Client>(client::Options)>;

  // `factory` starts the client (client::Client::Start in production, a fake
  // in tests). Nothing connects before InitialDeviceBudget().
  DaemonControlPlane(const DaemonLinkOptions& options, ClientFactory factory);
  ~DaemonControlPlane() override;  // Close()

  uint64_t InitialDeviceBudget(const DeviceIdentity& device, uint64_t local_default) override;
  uint64_t InitialHostBudget(uint64_t local_default) override;
  void OnBudgetChange(std::function<void(uint64_t)> callback) override;
  void SetUsageSource(std::function<UsageReport()> source) override;
  // The first device's NVMe tier channel (SpillTierOf).
  SpillTier* spill_tier() override;
  // The first device's host-tier control (OnHostTierControlOf).
  void OnHostTierControl(HostTierControl control) override;
  // One view per ordinal: the device's core registers its GPU and its
  // callbacks through it (Note [several devices]).
  ControlPlane* ForDevice(int ordinal) override;

  // What a view forwards: the callbacks of the core of GPU `uuid`.
  void OnBudgetChangeOf(const std::string& uuid, std::function<void(uint64_t)> callback);
  void SetUsageSourceOf(const std::string& uuid, std::function<UsageReport()> source);
  // The NVMe tier channel of GPU `uuid`'s core: connected to the daemon's
  // tier socket once per GPU (Note [several devices]); null if the daemon has
  // no NVMe tier, refused, or staging_slots is 0.
  SpillTier* SpillTierOf(const std::string& uuid);
  // How HOST_BUDGET and DEMOTE directives reach GPU `uuid`'s core: HOST_BUDGET
  // calls every core's set_budget, DEMOTE the cores' demote in registration
  // order until the bytes are moved (Note [several devices]).
  void OnHostTierControlOf(const std::string& uuid, HostTierControl control);

  // Stops the worker and closes the client. Idempotent.
  void Close();

 private:
  // Note [admission]: the registration's budget, or a later one that is usable.
  std::optional<uint64_t> AwaitUsableBudget(const std::string& uuid, uint64_t floor);
  client::GpuClaim ClaimFor(const DeviceIdentity& device) const;
  // Registers the process with its first device. Returns the budget.
  uint64_t Register(const client::GpuClaim& claim, uint64_t local_default);
  // Adds a further device's GPU to the registration. Returns the budget.
  uint64_t AddDevice(const client::GpuClaim& claim, uint64_t local_default);
  void OnDirective(const client::Directive& d);
  void OnState(client::State s);
  void WorkerLoop();
  void Apply(const client::Directive& d);
  // Calls the usage source of `uuid` (if any); queues its allocation events
  // for the next report. Returns false if no source is registered.
  bool PollUsage(const std::string& uuid, UsageReport* usage);
  void SendReport();
  // Polls every device in `devices`: *host_bytes is their host-tier bytes
  // together, *first the first device's report. False if the first device
  // has no usage source.
  bool PollHostUsage(const std::vector<std::string>& devices, UsageReport* first,
                     uint64_t* host_bytes);
  std::vector<std::string> Devices() const;
  static client::GpuUsage ToGpuUsage(const std::string& uuid, const UsageReport& u);
  // Note [several devices]: allocation ids of the n-th device carry n in their top byte.
  uint64_t TagOf(const std::string& uuid) const;

  const std::string socket_path_;
  const std::chrono::milliseconds connect_timeout_;
  const std::chrono::milliseconds report_interval_;
  const uint64_t demand_device_bytes_;
  const uint64_t min_device_bytes_;
  const uint64_t demand_host_bytes_;
  const uint32_t staging_slots_;
  const std::chrono::milliseconds tier_deadline_;
  const std::chrono::milliseconds admission_wait_;
  const ClientFactory factory_;

  class DeviceView;

  std::unique_ptr<client::Client> client_;  // set once by InitialDeviceBudget
  std::string uuid_;                        // the first device's; set once by InitialDeviceBudget
  // GPUs registered (or added), in order; written only by InitialDeviceBudget,
  // which the shim calls under its core-creation lock.
  std::vector<std::string> devices_ MEMSHIM_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<DeviceView>> views_ MEMSHIM_GUARDED_BY(mu_);
  // NVMe tier channels by GPU; each set once by SpillTierOf, lives until destruction.
  std::map<std::string, std::unique_ptr<TierChannel>> tiers_ MEMSHIM_GUARDED_BY(mu_);

  std::thread worker_;  // started by InitialDeviceBudget, joined by Close

  mutable Mutex mu_;
  CondVar cv_;  // directives_ or stop_ changed
  bool stop_ MEMSHIM_GUARDED_BY(mu_) = false;
  std::deque<client::Directive> directives_ MEMSHIM_GUARDED_BY(mu_);
  // Budget directives awaiting their GPU's callback.
  std::deque<client::Directive> deferred_ MEMSHIM_GUARDED_BY(mu_);
  std::optional<uint64_t> host_budget_ MEMSHIM_GUARDED_BY(mu_);  // from the daemon, if it said
  std::set<std::string> have_callback_ MEMSHIM_GUARDED_BY(mu_);  // GPUs whose core is attached
  // Last given to each GPU's core (or returned initially).
  std::map<std::string, uint64_t> applied_budget_ MEMSHIM_GUARDED_BY(mu_);

  Mutex callback_mu_;  // held while the budget or host-tier callbacks run
  std::map<std::string, std::function<void(uint64_t)>> callbacks_ MEMSHIM_GUARDED_BY(callback_mu_);
  std::map<std::string, HostTierControl> host_controls_ MEMSHIM_GUARDED_BY(callback_mu_);
  Mutex source_mu_;  // held while a usage source runs
  std::map<std::string, std::function<UsageReport()>> sources_ MEMSHIM_GUARDED_BY(source_mu_);

  // Worker thread only.
  uint64_t iteration_ = 0;
  std::vector<std::pair<std::string, AllocEvent>> pending_events_;  // GPU, tagged event
  uint64_t last_dropped_ = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_DAEMON_LINK_DAEMON_CONTROL_PLANE_H_

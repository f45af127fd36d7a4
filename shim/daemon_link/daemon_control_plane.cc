#include "shim/daemon_link/daemon_control_plane.h"

#include <errno.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "shim/core/log.h"

namespace memvirt::shim {
namespace {

constexpr size_t kMaxAllocHintsPerBatch = 65536;  // memvirt.proto: HintBatch.allocs

unsigned long long MiB(uint64_t bytes) { return static_cast<unsigned long long>(bytes >> 20); }

}  // namespace

std::chrono::milliseconds MillisecondsFromEnvironment(const char* name,
                                                      std::chrono::milliseconds fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long ms = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || ms > 86400000ull) {
    MEMSHIM_LOG(kWarn, "ignoring %s=%s (want 0..86400000)", name, v);
    return fallback;
  }
  return std::chrono::milliseconds(ms);
}

std::chrono::milliseconds TierDeadlineFromEnvironment() {
  const auto ms = MillisecondsFromEnvironment("MEMSHIM_TIER_DEADLINE_MS", std::chrono::seconds(60));
  return std::max(ms, std::chrono::milliseconds(1));
}

std::chrono::milliseconds AdmissionWaitFromEnvironment() {
  return MillisecondsFromEnvironment("MEMSHIM_ADMISSION_WAIT_MS", std::chrono::seconds(30));
}

DaemonControlPlane::DaemonControlPlane(const DaemonLinkOptions& options, ClientFactory factory)
    : socket_path_(options.socket_path != nullptr ? options.socket_path : ""),
      connect_timeout_(options.connect_timeout_ms),
      report_interval_(std::max<uint32_t>(options.report_interval_ms, 10)),
      demand_device_bytes_(options.demand_device_bytes),
      min_device_bytes_(options.min_device_bytes),
      demand_host_bytes_(options.demand_host_bytes),
      staging_slots_(options.staging_slots),
      tier_deadline_(TierDeadlineFromEnvironment()),
      admission_wait_(AdmissionWaitFromEnvironment()),
      factory_(std::move(factory)) {}

DaemonControlPlane::~DaemonControlPlane() { Close(); }

// A device's core: forwards to the plane with its GPU's uuid.
class DaemonControlPlane::DeviceView final : public ControlPlane {
 public:
  explicit DeviceView(DaemonControlPlane* plane) : plane_(plane) {}
  uint64_t InitialDeviceBudget(const DeviceIdentity& device, uint64_t local_default) override {
    uuid_ = device.uuid;
    return plane_->InitialDeviceBudget(device, local_default);
  }
  uint64_t InitialHostBudget(uint64_t local_default) override {
    return plane_->InitialHostBudget(local_default);
  }
  void OnBudgetChange(std::function<void(uint64_t)> callback) override {
    plane_->OnBudgetChangeOf(uuid_, std::move(callback));
  }
  void SetUsageSource(std::function<UsageReport()> source) override {
    plane_->SetUsageSourceOf(uuid_, std::move(source));
  }
  SpillTier* spill_tier() override { return plane_->SpillTierOf(uuid_); }
  void OnHostTierControl(HostTierControl control) override {
    plane_->OnHostTierControlOf(uuid_, std::move(control));
  }

 private:
  DaemonControlPlane* const plane_;
  std::string uuid_;  // set by InitialDeviceBudget, which the core calls first
};

ControlPlane* DaemonControlPlane::ForDevice(int ordinal) {
  MutexLock lock(&mu_);
  std::unique_ptr<DeviceView>& view = views_[ordinal];
  if (view == nullptr) view = std::make_unique<DeviceView>(this);
  return view.get();
}

client::GpuClaim DaemonControlPlane::ClaimFor(const DeviceIdentity& device) const {
  client::GpuClaim claim;
  claim.gpu_uuid = device.uuid;
  claim.device_memory_bytes = device.total_bytes;
  claim.demand_bytes = demand_device_bytes_;
  claim.min_bytes = std::min(min_device_bytes_, device.total_bytes);
  if (claim.demand_bytes != 0) claim.min_bytes = std::min(claim.min_bytes, claim.demand_bytes);
  return claim;
}

// Note [several devices]
// One registration per process, one budget per GPU: the core of the first device registers the
// process with its GPU; the core of each further device adds its GPU to the registration
// (client::Client::AddGpu, protocol minor version 2) and waits for that GPU's budget as the
// first one does (Note [admission]). Directives name their GPU: a BUDGET directive reaches only
// the callback of that GPU's core, and is deferred until that core is attached. Every report
// carries the usage of each GPU whose core is attached, and allocation hints name their GPU; an
// allocation id is an offset in its core's reservation, so the ids of the n-th device carry n in
// their top byte (a daemon keys live allocations by id). The host budget is the process's, one
// for all its cores (Note [shared host budget] in shim/core/host_ledger.h): a HOST_BUDGET
// directive reaches every core (each demotes its own chunks while the process is over it), a
// DEMOTE directive asks the cores in registration order until the bytes are moved, and the
// acknowledgement judges the host bytes of all the GPUs together. Every core has an NVMe tier
// channel of its own (its own staging buffers; the daemon serves one connection per GPU of a
// process), since a channel is driven under its core's lock. A GPU the daemon does not add (an
// older daemon, an unknown GPU) runs with its local budget, and is claimed again by the next
// registration.
uint64_t DaemonControlPlane::InitialDeviceBudget(const DeviceIdentity& device,
                                                 uint64_t local_default) {
  if (device.uuid.empty() || device.total_bytes == 0) {
    MEMSHIM_LOG(kWarn, "the driver reports no device UUID; not registering with the daemon");
    return local_default;
  }
  {
    MutexLock lock(&mu_);
    if (std::find(devices_.begin(), devices_.end(), device.uuid) != devices_.end()) {
      return applied_budget_.count(device.uuid) != 0 ? applied_budget_[device.uuid] : local_default;
    }
    devices_.push_back(device.uuid);
  }
  const client::GpuClaim claim = ClaimFor(device);
  return client_ == nullptr ? Register(claim, local_default) : AddDevice(claim, local_default);
}

uint64_t DaemonControlPlane::Register(const client::GpuClaim& claim, uint64_t local_default) {
  uuid_ = claim.gpu_uuid;
  client::Options o;
  o.socket_path = socket_path_;
  o.gpus.push_back(claim);
  o.process_name = program_invocation_short_name;
  o.host_demand_bytes = demand_host_bytes_;
  o.on_directive = [this](const client::Directive& d) { OnDirective(d); };
  o.on_state = [this](client::State s) { OnState(s); };
  client_ = factory_(std::move(o));
  worker_ = std::thread([this] { WorkerLoop(); });

  if (!client_->WaitConnected(connect_timeout_)) {
    MEMSHIM_LOG(kWarn,
                "memvirtd at %s did not register this process within %lld ms; running "
                "standalone with a %llu MiB device budget and retrying in the background",
                socket_path_.c_str(), static_cast<long long>(connect_timeout_.count()),
                MiB(local_default));
    return local_default;
  }
  const uint64_t budget = AwaitUsableBudget(uuid_, claim.min_bytes).value_or(local_default);
  {
    MutexLock lock(&mu_);
    applied_budget_[uuid_] = budget;
  }
  MEMSHIM_LOG(kInfo, "registered with memvirtd at %s: %llu MiB device budget on %s",
              socket_path_.c_str(), MiB(budget), uuid_.c_str());
  return budget;
}

uint64_t DaemonControlPlane::AddDevice(const client::GpuClaim& claim, uint64_t local_default) {
  client_->AddGpu(claim);
  if (client_->state() != client::State::kConnected) {
    MEMSHIM_LOG(kWarn, "memvirtd is not connected: %s runs with its local %llu MiB budget",
                claim.gpu_uuid.c_str(), MiB(local_default));
    return local_default;
  }
  const std::optional<uint64_t> granted = AwaitUsableBudget(claim.gpu_uuid, claim.min_bytes);
  if (!granted.has_value()) {
    MEMSHIM_LOG(kWarn,
                "memvirtd did not add %s to this process's registration (older daemon or "
                "refused); it runs with its local %llu MiB budget",
                claim.gpu_uuid.c_str(), MiB(local_default));
    return local_default;
  }
  {
    MutexLock lock(&mu_);
    applied_budget_[claim.gpu_uuid] = *granted;
  }
  MEMSHIM_LOG(kInfo, "added %s to the memvirtd registration: %llu MiB device budget",
              claim.gpu_uuid.c_str(), MiB(*granted));
  return *granted;
}

// Note [admission]
// A newcomer's budget grows only from memory nobody holds (Note [budget ledger] in
// daemon/core/node_state.h): while the others have not yet acknowledged their shrinks, while the
// daemon is in its restart grace period, or while the GPU is drained, the daemon says the budget
// is pending (budget 0) and sends the first usable one as a BUDGET directive later; a process that
// started with 0 would fail its first launch with CUDA_ERROR_OUT_OF_MEMORY. So the link waits, up
// to admission_wait (MEMSHIM_ADMISSION_WAIT_MS), while the GPU's budget is pending (or, from a
// daemon that does not say pending, below max(floor, 1 byte)). When the wait runs out the process
// goes on with what it was granted and says so.
std::optional<uint64_t> DaemonControlPlane::AwaitUsableBudget(const std::string& uuid,
                                                              uint64_t floor) {
  const uint64_t usable = std::max<uint64_t>(floor, 1);
  const auto start = std::chrono::steady_clock::now();
  auto waiting = [&](const std::optional<uint64_t>& granted) {
    return client_->BudgetPending(uuid) || granted.value_or(usable) < usable;
  };
  std::optional<uint64_t> granted = client_->Budget(uuid);
  if (!waiting(granted)) return granted;
  while (std::chrono::steady_clock::now() - start < admission_wait_ &&
         client_->state() == client::State::kConnected) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    granted = client_->Budget(uuid);
    if (!waiting(granted)) {
      MEMSHIM_LOG(kInfo, "waited %lld ms for a usable device budget on %s",
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count()),
                  uuid.c_str());
      return granted;
    }
  }
  MEMSHIM_LOG(kWarn,
              "memvirtd granted only %llu MiB of device memory on %s within %lld ms (GPU "
              "drained or fully held?); going on with it",
              MiB(granted.value_or(0)), uuid.c_str(),
              static_cast<long long>(admission_wait_.count()));
  return granted;
}

uint64_t DaemonControlPlane::InitialHostBudget(uint64_t local_default) {
  MutexLock lock(&mu_);
  // 0 from the daemon: no host limit of its own; keep the local one.
  if (!host_budget_.has_value() || *host_budget_ == 0) return local_default;
  return std::min(local_default, *host_budget_);
}

SpillTier* DaemonControlPlane::spill_tier() { return SpillTierOf(uuid_); }

SpillTier* DaemonControlPlane::SpillTierOf(const std::string& uuid) {
  if (staging_slots_ == 0 || client_ == nullptr || uuid.empty()) return nullptr;
  {
    MutexLock lock(&mu_);
    auto it = tiers_.find(uuid);
    if (it != tiers_.end()) return it->second.get();
  }
  if (client_->state() != client::State::kConnected) return nullptr;
  const char* error = nullptr;
  std::unique_ptr<TierChannel> tier =
      TierChannel::Connect(socket_path_ + tier::kTierSocketSuffix, staging_slots_,
                           {.connect = connect_timeout_, .request = tier_deadline_}, &error);
  if (tier == nullptr) {
    MEMSHIM_LOG(kInfo, "no NVMe tier for %s: %s", uuid.c_str(), error);
  } else {
    MEMSHIM_LOG(kInfo, "NVMe tier for %s: %llu MiB of swap on the node, %u staging buffers",
                uuid.c_str(), static_cast<unsigned long long>(tier->capacity_bytes() >> 20),
                staging_slots_);
  }
  MutexLock lock(&mu_);
  std::unique_ptr<TierChannel>& slot = tiers_[uuid];
  if (slot == nullptr) slot = std::move(tier);  // a refused connection is not retried
  return slot.get();
}

void DaemonControlPlane::OnBudgetChange(std::function<void(uint64_t)> callback) {
  OnBudgetChangeOf(uuid_, std::move(callback));
}

void DaemonControlPlane::OnBudgetChangeOf(const std::string& uuid,
                                          std::function<void(uint64_t)> callback) {
  const bool set = static_cast<bool>(callback);
  {
    MutexLock lock(&callback_mu_);
    if (set) {
      callbacks_[uuid] = std::move(callback);
    } else {
      callbacks_.erase(uuid);
    }
  }
  MutexLock lock(&mu_);
  if (!set) {
    have_callback_.erase(uuid);
    return;
  }
  have_callback_.insert(uuid);
  for (auto it = deferred_.begin(); it != deferred_.end();) {
    if (it->gpu_uuid != uuid) {
      ++it;
      continue;
    }
    directives_.push_back(std::move(*it));
    it = deferred_.erase(it);
  }
  cv_.NotifyAll();
}

void DaemonControlPlane::OnHostTierControl(HostTierControl control) {
  OnHostTierControlOf(uuid_, std::move(control));
}

void DaemonControlPlane::OnHostTierControlOf(const std::string& uuid, HostTierControl control) {
  MutexLock lock(&callback_mu_);
  if (control.set_budget || control.demote) {
    host_controls_[uuid] = std::move(control);
  } else {
    host_controls_.erase(uuid);
  }
}

void DaemonControlPlane::SetUsageSource(std::function<UsageReport()> source) {
  SetUsageSourceOf(uuid_, std::move(source));
}

void DaemonControlPlane::SetUsageSourceOf(const std::string& uuid,
                                          std::function<UsageReport()> source) {
  MutexLock lock(&source_mu_);
  if (source) {
    sources_[uuid] = std::move(source);
  } else {
    sources_.erase(uuid);
  }
}

void DaemonControlPlane::Close() {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.NotifyAll();
  if (worker_.joinable()) worker_.join();
  if (client_ != nullptr) client_->Close();
}

// Runs on the client's connection thread: queue and return.
void DaemonControlPlane::OnDirective(const client::Directive& d) {
  MutexLock lock(&mu_);
  if (d.kind == client::Directive::Kind::kHostBudget) host_budget_ = d.budget_bytes;
  directives_.push_back(d);
  cv_.NotifyAll();
}

void DaemonControlPlane::OnState(client::State s) {
  if (s == client::State::kDisconnected) {
    MEMSHIM_LOG(kWarn,
                "lost (or could not reach) memvirtd at %s: keeping the current budget, "
                "reconnecting in the background",
                socket_path_.c_str());
  } else if (s == client::State::kConnected) {
    MEMSHIM_LOG(kInfo, "connected to memvirtd at %s", socket_path_.c_str());
  }
}

void DaemonControlPlane::WorkerLoop() {
  auto next_report = std::chrono::steady_clock::now() + report_interval_;
  MutexLock lock(&mu_);
  while (!stop_) {
    while (!stop_ && directives_.empty() && cv_.WaitUntil(&mu_, next_report)) {
    }
    if (stop_) break;
    while (!directives_.empty()) {
      client::Directive d = std::move(directives_.front());
      directives_.pop_front();
      if (d.kind == client::Directive::Kind::kBudget && have_callback_.count(d.gpu_uuid) == 0 &&
          std::find(devices_.begin(), devices_.end(), d.gpu_uuid) != devices_.end()) {
        deferred_.push_back(std::move(d));  // the GPU's core is not attached yet
        continue;
      }
      mu_.Unlock();  // Apply calls into the core
      Apply(d);
      mu_.Lock();
    }
    if (std::chrono::steady_clock::now() >= next_report) {
      mu_.Unlock();
      SendReport();
      mu_.Lock();
      next_report = std::chrono::steady_clock::now() + report_interval_;
    }
  }
}

void DaemonControlPlane::Apply(const client::Directive& d) {
  using Kind = client::Directive::Kind;
  UsageReport usage;
  switch (d.kind) {
    case Kind::kBudget: {
      bool ours = false;
      {
        MutexLock lock(&mu_);
        ours = std::find(devices_.begin(), devices_.end(), d.gpu_uuid) != devices_.end();
        // The budget already returned by InitialDeviceBudget.
        auto applied = applied_budget_.find(d.gpu_uuid);
        if (d.id == 0 && applied != applied_budget_.end() && applied->second == d.budget_bytes) {
          return;
        }
        if (ours) applied_budget_[d.gpu_uuid] = d.budget_bytes;
      }
      if (!ours) {
        client_->Ack(d.id, false, std::nullopt);  // not a GPU of this process
        return;
      }
      const auto start = std::chrono::steady_clock::now();
      {
        MutexLock lock(&callback_mu_);
        auto it = callbacks_.find(d.gpu_uuid);
        if (it != callbacks_.end()) it->second(d.budget_bytes);
      }
      if (d.id == 0) return;  // informational (re-registration)
      const bool known = PollUsage(d.gpu_uuid, &usage);
      const bool complied = known && usage.device_resident_bytes <= d.budget_bytes;
      MEMSHIM_LOG(kInfo, "device budget %llu MiB on %s applied in %lld us (%llu MiB resident)",
                  MiB(d.budget_bytes), d.gpu_uuid.c_str(),
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count()),
                  MiB(usage.device_resident_bytes));
      if (!complied) {
        MEMSHIM_LOG(kWarn, "cannot shrink to the %llu MiB budget yet (%llu MiB resident)",
                    MiB(d.budget_bytes), MiB(usage.device_resident_bytes));
      }
      client_->Ack(d.id, complied,
                   known ? std::optional(ToGpuUsage(d.gpu_uuid, usage)) : std::nullopt);
      return;
    }
    case Kind::kHostBudget: {
      if (d.id == 0) return;
      const std::vector<std::string> devices = Devices();
      // Without a spill tier the host tier's size is fixed when the core is
      // created; a lower budget is met only if the tier already fits it.
      if (d.budget_bytes != 0) {
        MutexLock lock(&callback_mu_);
        for (const std::string& uuid : devices) {  // Note [several devices]
          auto it = host_controls_.find(uuid);
          if (it != host_controls_.end() && it->second.set_budget) {
            it->second.set_budget(d.budget_bytes);
          }
        }
      }
      uint64_t host_bytes = 0;
      const bool known = PollHostUsage(devices, &usage, &host_bytes);
      const bool complied = known && (d.budget_bytes == 0 || host_bytes <= d.budget_bytes);
      client_->Ack(d.id, complied, known ? std::optional(ToGpuUsage(uuid_, usage)) : std::nullopt);
      return;
    }
    case Kind::kDemote: {
      const std::vector<std::string> devices = Devices();
      uint64_t moved = 0;
      {
        MutexLock lock(&callback_mu_);
        for (const std::string& uuid : devices) {  // Note [several devices]
          if (moved >= d.bytes) break;
          auto it = host_controls_.find(uuid);
          if (it != host_controls_.end() && it->second.demote) {
            moved += it->second.demote(d.bytes - moved);
          }
        }
      }
      uint64_t host_bytes = 0;
      const bool known = PollHostUsage(devices, &usage, &host_bytes);
      MEMSHIM_LOG(kInfo, "demoted %llu MiB of the host tier to NVMe (asked %llu MiB)", MiB(moved),
                  MiB(d.bytes));
      client_->Ack(d.id, moved >= d.bytes,
                   known ? std::optional(ToGpuUsage(uuid_, usage)) : std::nullopt);
      return;
    }
    case Kind::kEvict:
      // Not supported by this shim: budgets are the only lever (Note in docs/shim.md).
      MEMSHIM_LOG(kDebug, "ignoring unsupported directive %llu",
                  static_cast<unsigned long long>(d.id));
      client_->Ack(d.id, false, std::nullopt);
      return;
  }
}

bool DaemonControlPlane::PollUsage(const std::string& uuid, UsageReport* usage) {
  {
    MutexLock lock(&source_mu_);
    auto it = sources_.find(uuid);
    if (it == sources_.end()) return false;
    *usage = it->second();
  }
  const uint64_t tag = TagOf(uuid);
  for (const AllocEvent& e : usage->alloc_events) {
    if (pending_events_.size() >= kMaxAllocHintsPerBatch) break;
    pending_events_.push_back({uuid, {e.alloc_id | tag, e.bytes, e.freed}});
  }
  if (usage->dropped_alloc_events != last_dropped_) {
    MEMSHIM_LOG(kDebug, "%llu allocation hints dropped so far",
                static_cast<unsigned long long>(usage->dropped_alloc_events));
    last_dropped_ = usage->dropped_alloc_events;
  }
  return true;
}

std::vector<std::string> DaemonControlPlane::Devices() const {
  MutexLock lock(&mu_);
  return devices_;
}

bool DaemonControlPlane::PollHostUsage(const std::vector<std::string>& devices, UsageReport* first,
                                       uint64_t* host_bytes) {
  bool known = false;
  *host_bytes = 0;
  for (const std::string& uuid : devices) {
    UsageReport u;
    if (!PollUsage(uuid, &u)) continue;
    *host_bytes += u.host_resident_bytes;
    if (uuid == uuid_) *first = u;
    known = known || uuid == uuid_;
  }
  return known;
}

uint64_t DaemonControlPlane::TagOf(const std::string& uuid) const {
  MutexLock lock(&mu_);
  const auto it = std::find(devices_.begin(), devices_.end(), uuid);
  return static_cast<uint64_t>(it - devices_.begin()) << 56;
}

client::GpuUsage DaemonControlPlane::ToGpuUsage(const std::string& uuid, const UsageReport& u) {
  client::GpuUsage g;
  g.gpu_uuid = uuid;
  g.resident_bytes = u.device_resident_bytes;
  g.host_bytes = u.host_resident_bytes;
  g.paged_in_bytes = u.page_in_bytes;
  g.paged_out_bytes = u.page_out_bytes;
  g.nvme_bytes = u.nvme_resident_bytes;
  g.nvme_read_bytes = u.nvme_read_bytes;
  g.nvme_write_bytes = u.nvme_write_bytes;
  return g;
}

void DaemonControlPlane::SendReport() {
  if (client_ == nullptr) return;
  std::vector<std::string> devices;
  {
    MutexLock lock(&mu_);
    devices = devices_;
  }
  std::vector<client::GpuUsage> usages;
  for (const std::string& uuid : devices) {
    UsageReport usage;
    if (PollUsage(uuid, &usage)) usages.push_back(ToGpuUsage(uuid, usage));
  }
  if (usages.empty()) return;
  client::HintBatch batch;
  batch.iteration = ++iteration_;
  batch.allocs.reserve(pending_events_.size());
  for (const auto& [uuid, e] : pending_events_) {
    client::AllocHint h;
    h.alloc_id = e.alloc_id;
    h.gpu_uuid = uuid;
    h.bytes = e.bytes;
    h.freed = e.freed;
    batch.allocs.push_back(std::move(h));
  }
  pending_events_.clear();
  batch.usage = std::move(usages);
  client_->SendHints(std::move(batch));
}

}  // namespace memvirt::shim

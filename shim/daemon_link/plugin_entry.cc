// libmemshim_daemon.so's only export (Note [daemon link as a plugin]).
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <set>

#include "memvirt/client.h"
#include "shim/core/log.h"
#include "shim/core/thread_annotations.h"
#include "shim/daemon_link/daemon_control_plane.h"
#include "shim/daemon_link/daemon_link_abi.h"

namespace memvirt::shim {
namespace {

// Note [closing at exit]
//   The client's threads use gRPC. They are stopped from an atexit handler,
//   registered after gRPC's libraries were loaded and initialized, so it runs
//   before their static destructors: no thread of ours touches gRPC while it
//   is being torn down.
//   A child forked after the link started has none of its threads: it must not
//   join them (or touch the parent's connection), so the handler does nothing there.
Mutex g_mu;
std::set<DaemonControlPlane*>* g_live MEMSHIM_GUARDED_BY(g_mu) = nullptr;  // leaked
// The process that started the link; read without g_mu, which a forked child
// may have inherited locked.
std::atomic<pid_t> g_owner{0};

void CloseAllAtExit() {
  if (getpid() != g_owner.load()) return;
  std::set<DaemonControlPlane*> live;
  {
    MutexLock lock(&g_mu);
    if (g_live != nullptr) live = *g_live;
  }
  for (DaemonControlPlane* p : live) p->Close();
}

// Keeps the registry of live planes for CloseAllAtExit.
class RegisteredPlane final : public ControlPlane {
 public:
  explicit RegisteredPlane(const DaemonLinkOptions& options)
      : plane_(options, [](client::Options o) { return client::Client::Start(std::move(o)); }) {
    MutexLock lock(&g_mu);
    if (g_live == nullptr) {
      g_live = new std::set<DaemonControlPlane*>();
      g_owner = getpid();
      std::atexit(&CloseAllAtExit);
    }
    g_live->insert(&plane_);
  }
  ~RegisteredPlane() override {
    MutexLock lock(&g_mu);
    g_live->erase(&plane_);
  }
  uint64_t InitialDeviceBudget(const DeviceIdentity& d, uint64_t local) override {
    return plane_.InitialDeviceBudget(d, local);
  }
  uint64_t InitialHostBudget(uint64_t local) override { return plane_.InitialHostBudget(local); }
  void OnBudgetChange(std::function<void(uint64_t)> cb) override {
    plane_.OnBudgetChange(std::move(cb));
  }
  void SetUsageSource(std::function<UsageReport()> s) override {
    plane_.SetUsageSource(std::move(s));
  }
  SpillTier* spill_tier() override { return plane_.spill_tier(); }
  void OnHostTierControl(HostTierControl c) override { plane_.OnHostTierControl(std::move(c)); }
  ControlPlane* ForDevice(int ordinal) override { return plane_.ForDevice(ordinal); }

 private:
  DaemonControlPlane plane_;
};

}  // namespace
}  // namespace memvirt::shim

extern "C" __attribute__((visibility("default"))) memvirt::shim::ControlPlane*
memshim_daemon_link_create(const memvirt::shim::DaemonLinkOptions* options, const char** error) {
  using memvirt::shim::kDaemonLinkAbiVersion;
  if (options == nullptr || options->abi_version != kDaemonLinkAbiVersion) {
    if (error != nullptr) *error = "daemon link ABI version mismatch";
    return nullptr;
  }
  if (options->socket_path == nullptr || options->socket_path[0] == '\0') {
    if (error != nullptr) *error = "no daemon socket path";
    return nullptr;
  }
  memvirt::shim::SetLogLevel(static_cast<memvirt::shim::LogLevel>(options->log_level));
  return new memvirt::shim::RegisteredPlane(*options);
}

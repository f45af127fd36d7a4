// The lock order between ShimCore and its ControlPlane (shim_core.h): a
// directive delivered while the core is being created, from a control-plane
// thread that holds the control plane's own lock, as the daemon link's
// worker does, must neither deadlock nor be lost.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "shim/core/shim_core.h"
#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

constexpr auto kDeadlockTimeout = std::chrono::seconds(10);

// Delivers a budget directive from its own thread as soon as the budget
// callback is registered, holding the callback lock while the callback runs;
// every registration takes the callback lock (as DaemonControlPlane does). A
// registration that cannot take the lock within kDeadlockTimeout is a
// deadlock: it is recorded and the registration goes ahead without the lock
// (so the test fails instead of hanging).
class DeliveringControlPlane final : public ControlPlane {
 public:
  explicit DeliveringControlPlane(uint64_t directive) : directive_(directive) {}
  ~DeliveringControlPlane() override {
    if (worker_.joinable()) worker_.join();
  }

  uint64_t InitialDeviceBudget(const DeviceIdentity&, uint64_t local) override { return local; }
  uint64_t InitialHostBudget(uint64_t local) override { return local; }
  void OnBudgetChange(std::function<void(uint64_t)> callback) override {
    const bool set = static_cast<bool>(callback);
    Register([&] { budget_ = std::move(callback); });
    if (!set || worker_.joinable()) return;
    worker_ = std::thread([this] {
      LockCallbacks();
      entered_ = true;
      if (budget_) budget_(directive_);
      delivered_ = true;
      UnlockCallbacks();
    });
    // Registration returns only once the directive is being delivered.
    while (!entered_) std::this_thread::yield();
  }
  void SetUsageSource(std::function<UsageReport()> source) override {
    Register([&] { source_ = std::move(source); });
  }
  void OnHostTierControl(HostTierControl control) override {
    Register([&] { host_ = std::move(control); });
  }

  void Join() { worker_.join(); }
  bool deadlocked() const { return deadlocked_; }
  bool delivered() const { return delivered_; }

 private:
  void Register(const std::function<void()>& store) {
    if (!LockCallbacks(std::chrono::system_clock::now() + kDeadlockTimeout)) {
      deadlocked_ = true;
      store();
      return;
    }
    store();
    UnlockCallbacks();
  }
  // The callback lock, taken with a deadline: a flag under state_mu_, waited
  // for on a condition variable until the holder releases it. (Not a timed
  // mutex: TSan does not model timed locks (pthread_mutex_clocklock) and
  // reports their unlock as an unlock of an unlocked mutex. The deadline is on
  // the system clock, whose condition variable wait is pthread_cond_timedwait,
  // which TSan models.)
  bool LockCallbacks(std::chrono::system_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(state_mu_);
    if (!released_.wait_until(lock, deadline, [this] { return !callbacks_locked_; })) return false;
    callbacks_locked_ = true;
    return true;
  }
  void LockCallbacks() {
    std::unique_lock<std::mutex> lock(state_mu_);
    released_.wait(lock, [this] { return !callbacks_locked_; });
    callbacks_locked_ = true;
  }
  void UnlockCallbacks() {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      callbacks_locked_ = false;
    }
    released_.notify_all();
  }

  const uint64_t directive_;
  std::mutex state_mu_;
  std::condition_variable released_;
  bool callbacks_locked_ = false;  // guarded by state_mu_
  std::function<void(uint64_t)> budget_;
  std::function<UsageReport()> source_;
  HostTierControl host_;
  std::thread worker_;
  std::atomic<bool> entered_{false};
  std::atomic<bool> delivered_{false};
  std::atomic<bool> deadlocked_{false};
};

TEST(ShimCoreControlTest, DirectiveDeliveredDuringCreationNeitherDeadlocksNorIsLost) {
  testing::FakeDriver fake(64 * kMiB);
  DeliveringControlPlane plane(4 * kMiB);
  CoreOptions options;
  options.device_budget = 16 * kMiB;
  options.host_budget = 64 * kMiB;
  options.va_bytes = 256 * kMiB;
  std::unique_ptr<ShimCore> core;
  ASSERT_EQ(ShimCore::Create(&fake.driver(), options, &plane, &core), CUDA_SUCCESS);
  plane.Join();
  EXPECT_FALSE(plane.deadlocked());
  EXPECT_TRUE(plane.delivered());
  EXPECT_EQ(core->stats().device_chunk_limit, 2u);  // the directive's 4 MiB
  CUdeviceptr p;
  EXPECT_EQ(core->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);  // the first allocation proceeds
  core.reset();
}

}  // namespace
}  // namespace memvirt::shim

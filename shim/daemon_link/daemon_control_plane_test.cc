#include "shim/daemon_link/daemon_control_plane.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace memvirt::shim {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kMiB = 1ull << 20;
constexpr char kUuid[] = "GPU-00000000-1111-2222-3333-444444444444";

// A client that "registers" at once (or never) and records what is sent.
class FakeClient final : public client::Client {
 public:
  FakeClient(client::Options o, bool reachable, uint64_t granted)
      : options_(std::move(o)), reachable_(reachable), granted_(granted) {}

  client::State state() const override {
    return reachable_ ? client::State::kConnected : client::State::kDisconnected;
  }
  bool WaitConnected(std::chrono::milliseconds) override {
    if (!reachable_) return false;
    client::Directive d;  // what the real client delivers on registration
    d.kind = client::Directive::Kind::kBudget;
    d.gpu_uuid = options_.gpus[0].gpu_uuid;
    d.budget_bytes = granted_;
    options_.on_directive(d);
    return true;
  }
  std::optional<uint64_t> Budget(const std::string& uuid) const override {
    budget_polls.fetch_add(1);
    if (!reachable_) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    if (uuid != options_.gpus[0].gpu_uuid && added_budget.count(uuid) == 0) return std::nullopt;
    return uuid == options_.gpus[0].gpu_uuid ? granted_.load() : added_budget.at(uuid);
  }
  bool BudgetPending(const std::string& uuid) const override {
    std::lock_guard<std::mutex> lock(mu_);
    return pending.count(uuid) != 0;
  }
  // A daemon of minor version 2 adds the GPU with `add_grant` (pending if 0); an older one
  // (add_supported false) never answers.
  void AddGpu(client::GpuClaim claim) override {
    std::lock_guard<std::mutex> lock(mu_);
    added.push_back(claim);
    if (!add_supported) return;
    if (add_grant == 0) {
      pending.insert(claim.gpu_uuid);
    } else {
      added_budget[claim.gpu_uuid] = add_grant;
    }
  }
  // The daemon's first usable BUDGET directive for a pending GPU.
  void Grant(const std::string& uuid, uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending.erase(uuid);
      added_budget[uuid] = bytes;
    }
    Push({.id = 0,
          .kind = client::Directive::Kind::kBudget,
          .gpu_uuid = uuid,
          .budget_bytes = bytes});
  }
  pid_t daemon_pid() const override { return 0; }
  uint64_t registrations() const override { return reachable_ ? 1 : 0; }
  void SendHints(client::HintBatch batch) override {
    std::lock_guard<std::mutex> lock(mu_);
    batches.push_back(std::move(batch));
  }
  void Ack(uint64_t id, bool complied, std::optional<client::GpuUsage> usage) override {
    std::lock_guard<std::mutex> lock(mu_);
    acks[id] = {complied, usage.has_value() ? usage->resident_bytes : ~0ull};
  }
  bool PollDirective(client::Directive*) override { return false; }
  void Close() override { closed = true; }

  // The daemon pushes a directive (on the "connection thread": the caller).
  void Push(const client::Directive& d) { options_.on_directive(d); }

  size_t BatchCount() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches.size();
  }

  client::Options options_;
  const bool reachable_;
  std::atomic<uint64_t> granted_;  // what Budget() says: the latest budget the daemon sent
  mutable std::atomic<uint64_t> budget_polls{0};  // Budget() calls so far
  mutable std::mutex mu_;
  std::vector<client::HintBatch> batches;
  std::vector<client::GpuClaim> added;
  std::map<std::string, uint64_t> added_budget;
  std::set<std::string> pending;
  bool add_supported = true;
  uint64_t add_grant = 48 * kMiB;
  std::map<uint64_t, std::pair<bool, uint64_t>> acks;
  std::atomic<bool> closed{false};
};

struct Harness {
  explicit Harness(bool reachable, uint64_t granted = 64 * kMiB, uint64_t min_bytes = 16 * kMiB,
                   uint32_t report_interval_ms = 20) {
    DaemonLinkOptions o;
    o.socket_path = "/nonexistent/test.sock";
    o.connect_timeout_ms = 50;
    o.report_interval_ms = report_interval_ms;
    o.min_device_bytes = min_bytes;
    plane = std::make_unique<DaemonControlPlane>(o, [this, reachable, granted](client::Options co) {
      auto c = std::make_unique<FakeClient>(std::move(co), reachable, granted);
      fake = c.get();
      created.store(c.get(), std::memory_order_release);
      return c;
    });
  }
  std::unique_ptr<DaemonControlPlane> plane;
  FakeClient* fake = nullptr;
  // The same client, published for threads that start before it exists.
  std::atomic<FakeClient*> created{nullptr};
};

client::Directive BudgetDirective(uint64_t id, uint64_t bytes, const std::string& uuid = kUuid) {
  client::Directive d;
  d.id = id;
  d.kind = client::Directive::Kind::kBudget;
  d.gpu_uuid = uuid;
  d.budget_bytes = bytes;
  return d;
}

// The daemon's EVICT directive, which the link acknowledges as not complied.
client::Directive EvictDirective(uint64_t id) {
  client::Directive d;
  d.id = id;
  d.kind = client::Directive::Kind::kEvict;
  return d;
}

// Issue 14, item 3 (Note [admission]): a registration granted less than is usable waits for the
// daemon to raise the budget, bounded by MEMSHIM_ADMISSION_WAIT_MS.
TEST(DaemonControlPlaneAdmissionTest, WaitsForAUsableBudgetBeforeStarting) {
  Harness h(/*reachable=*/true, /*granted=*/4 * kMiB, /*min_bytes=*/16 * kMiB);
  DeviceIdentity dev{kUuid, 80 * kMiB};
  std::thread daemon([&] {
    FakeClient* fake;
    while ((fake = h.created.load(std::memory_order_acquire)) == nullptr) {
      std::this_thread::yield();
    }
    // The link has seen the unusable grant and keeps asking: it waits (the others acknowledge
    // their shrinks meanwhile).
    while (fake->budget_polls.load() < 3) std::this_thread::yield();
    fake->granted_ = 32 * kMiB;
    fake->Push(BudgetDirective(7, 32 * kMiB));
  });
  // The later, usable budget: the link waited for it.
  EXPECT_EQ(h.plane->InitialDeviceBudget(dev, 1 * kMiB), 32 * kMiB);
  daemon.join();
}

TEST(DaemonControlPlaneAdmissionTest, TheWaitIsBounded) {
  setenv("MEMSHIM_ADMISSION_WAIT_MS", "150", 1);
  Harness h(/*reachable=*/true, /*granted=*/0, /*min_bytes=*/0);
  unsetenv("MEMSHIM_ADMISSION_WAIT_MS");
  DeviceIdentity dev{kUuid, 80 * kMiB};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(h.plane->InitialDeviceBudget(dev, 1 * kMiB), 0u);  // e.g. a drained GPU
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 150ms);
  EXPECT_LT(waited, 5s);
}

bool WaitFor(const std::function<bool()>& pred) {
  for (int i = 0; i < 300; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

// Waits until the fake holds an acknowledgement of `id`.
bool WaitForAck(FakeClient* fake, uint64_t id) {
  return WaitFor([&] {
    std::lock_guard<std::mutex> lock(fake->mu_);
    return fake->acks.count(id) == 1;
  });
}

TEST(DaemonControlPlaneTest, ClaimsTheDeviceAndReturnsTheGrantedBudget) {
  Harness h(/*reachable=*/true, 48 * kMiB, 8 * kMiB);
  const uint64_t budget = h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  EXPECT_EQ(budget, 48 * kMiB);
  ASSERT_NE(h.fake, nullptr);
  ASSERT_EQ(h.fake->options_.gpus.size(), 1u);
  EXPECT_EQ(h.fake->options_.gpus[0].gpu_uuid, kUuid);
  EXPECT_EQ(h.fake->options_.gpus[0].device_memory_bytes, 1024 * kMiB);
  EXPECT_EQ(h.fake->options_.gpus[0].min_bytes, 8 * kMiB);
  EXPECT_EQ(h.fake->options_.gpus[0].demand_bytes, 0u);
  h.plane->Close();
  EXPECT_TRUE(h.fake->closed);
}

TEST(DaemonControlPlaneTest, FallsBackToTheLocalBudgetWhenTheDaemonDoesNotAnswer) {
  Harness h(/*reachable=*/false);
  EXPECT_EQ(h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB), 900 * kMiB);
  EXPECT_EQ(h.plane->InitialHostBudget(4096 * kMiB), 4096 * kMiB);
}

TEST(DaemonControlPlaneTest, NoUuidMeansNoRegistration) {
  Harness h(/*reachable=*/true);
  EXPECT_EQ(h.plane->InitialDeviceBudget({"", 1024 * kMiB}, 900 * kMiB), 900 * kMiB);
  EXPECT_EQ(h.fake, nullptr);
}

TEST(DaemonControlPlaneTest, HostBudgetFromTheDaemonCapsTheLocalOne) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  client::Directive host;
  host.kind = client::Directive::Kind::kHostBudget;
  host.budget_bytes = 256 * kMiB;
  h.fake->Push(host);
  EXPECT_EQ(h.plane->InitialHostBudget(4096 * kMiB), 256 * kMiB);
  EXPECT_EQ(h.plane->InitialHostBudget(128 * kMiB), 128 * kMiB);
}

TEST(DaemonControlPlaneTest, ShrinkIsAppliedThroughTheCallbackAndAcknowledged) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  std::atomic<uint64_t> resident{64 * kMiB};
  std::atomic<uint64_t> applied{0};
  h.plane->SetUsageSource([&] {
    UsageReport u;
    u.device_resident_bytes = resident.load();
    return u;
  });
  h.plane->OnBudgetChange([&](uint64_t bytes) {
    applied = bytes;
    resident = std::min<uint64_t>(resident.load(), bytes);  // the core evicts down
  });
  h.fake->Push(BudgetDirective(7, 32 * kMiB));
  ASSERT_TRUE(WaitForAck(h.fake, 7));
  EXPECT_EQ(applied.load(), 32 * kMiB);
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  EXPECT_TRUE(h.fake->acks[7].first);
  EXPECT_EQ(h.fake->acks[7].second, 32 * kMiB);
}

TEST(DaemonControlPlaneTest, ShrinkThatCannotBeMetIsAcknowledgedAsNotComplied) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  h.plane->SetUsageSource([] {
    UsageReport u;
    u.device_resident_bytes = 64 * kMiB;  // pinned: cannot shrink
    return u;
  });
  h.plane->OnBudgetChange([](uint64_t) {});
  h.fake->Push(BudgetDirective(9, 32 * kMiB));
  ASSERT_TRUE(WaitForAck(h.fake, 9));
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  EXPECT_FALSE(h.fake->acks[9].first);
}

TEST(DaemonControlPlaneTest, DirectiveBeforeTheCoreAttachesIsAppliedOnceItDoes) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  h.fake->Push(BudgetDirective(11, 96 * kMiB));
  // Directives are handled in order: once the one after it is acknowledged,
  // directive 11 has been handled too.
  h.fake->Push(EvictDirective(12));
  ASSERT_TRUE(WaitForAck(h.fake, 12));
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    EXPECT_EQ(h.fake->acks.count(11), 0u);  // nobody to apply it yet
  }
  std::atomic<uint64_t> applied{0};
  h.plane->SetUsageSource([] { return UsageReport{}; });
  h.plane->OnBudgetChange([&](uint64_t bytes) { applied = bytes; });
  ASSERT_TRUE(WaitFor([&] { return applied.load() == 96 * kMiB; }));
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    return h.fake->acks.count(11) == 1 && h.fake->acks[11].first;
  }));
}

TEST(DaemonControlPlaneTest, UnsupportedDirectivesAreRefusedAndOtherGpusIgnored) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  std::atomic<int> calls{0};
  h.plane->OnBudgetChange([&](uint64_t) { ++calls; });
  client::Directive evict;
  evict.id = 21;
  evict.kind = client::Directive::Kind::kEvict;
  evict.gpu_uuid = kUuid;
  evict.bytes = 4 * kMiB;
  h.fake->Push(evict);
  h.fake->Push(BudgetDirective(22, 1, "GPU-ffffffff-1111-2222-3333-444444444444"));
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    return h.fake->acks.size() == 2;
  }));
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  EXPECT_FALSE(h.fake->acks[21].first);
  EXPECT_FALSE(h.fake->acks[22].first);
  EXPECT_EQ(calls.load(), 0);
}

TEST(DaemonControlPlaneTest, HostTierDirectivesReachTheCoreAndAreAcknowledged) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  std::atomic<uint64_t> host_budget{0}, demote_asked{0};
  h.plane->SetUsageSource([] { return UsageReport{}; });
  h.plane->OnHostTierControl({[&](uint64_t bytes) { host_budget = bytes; },
                              [&](uint64_t bytes) {
                                demote_asked = bytes;
                                return bytes / 2;  // could move only half
                              }});
  client::Directive host;
  host.id = 31;
  host.kind = client::Directive::Kind::kHostBudget;
  host.budget_bytes = 64 * kMiB;
  h.fake->Push(host);
  client::Directive demote;
  demote.id = 32;
  demote.kind = client::Directive::Kind::kDemote;
  demote.bytes = 8 * kMiB;
  h.fake->Push(demote);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    return h.fake->acks.count(31) == 1 && h.fake->acks.count(32) == 1;
  }));
  EXPECT_EQ(host_budget.load(), 64 * kMiB);
  EXPECT_EQ(demote_asked.load(), 8 * kMiB);
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  EXPECT_TRUE(h.fake->acks[31].first);   // usage 0 fits
  EXPECT_FALSE(h.fake->acks[32].first);  // only half was moved
}

TEST(DaemonControlPlaneTest, ReportsUsageAndAllocationHintsInBatches) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  std::atomic<int> polls{0};
  h.plane->SetUsageSource([&] {
    UsageReport u;
    u.device_resident_bytes = 10 * kMiB;
    u.host_resident_bytes = 20 * kMiB;
    u.page_in_bytes = 30 * kMiB;
    u.page_out_bytes = 40 * kMiB;
    if (polls++ == 0) {
      u.alloc_events = {{4096, 100, false}, {4096, 100, true}, {8192, 5 * kMiB, false}};
    }
    return u;
  });
  ASSERT_TRUE(WaitFor([&] { return h.fake->BatchCount() >= 3; }));
  h.plane->Close();
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  size_t allocs = 0;
  uint64_t last_iteration = 0;
  for (const client::HintBatch& b : h.fake->batches) {
    EXPECT_GT(b.iteration, last_iteration);
    last_iteration = b.iteration;
    ASSERT_EQ(b.usage.size(), 1u);
    EXPECT_EQ(b.usage[0].gpu_uuid, kUuid);
    EXPECT_EQ(b.usage[0].resident_bytes, 10 * kMiB);
    EXPECT_EQ(b.usage[0].host_bytes, 20 * kMiB);
    EXPECT_EQ(b.usage[0].paged_in_bytes, 30 * kMiB);
    EXPECT_EQ(b.usage[0].paged_out_bytes, 40 * kMiB);
    allocs += b.allocs.size();
  }
  EXPECT_EQ(allocs, 3u);  // each event sent exactly once
  const client::HintBatch& first = h.fake->batches[0];
  ASSERT_EQ(first.allocs.size(), 3u);
  EXPECT_EQ(first.allocs[1].alloc_id, 4096u);
  EXPECT_TRUE(first.allocs[1].freed);
  EXPECT_EQ(first.allocs[2].bytes, 5 * kMiB);
}

TEST(DaemonControlPlaneTest, RemovedCallbacksAreNotCalledAfterwards) {
  Harness h(/*reachable=*/true);
  h.plane->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  std::atomic<int> polls{0};
  h.plane->SetUsageSource([&] {
    ++polls;
    return UsageReport{};
  });
  ASSERT_TRUE(WaitFor([&] { return polls.load() >= 1; }));
  h.plane->SetUsageSource({});  // returns once no call of the source is running
  const int after = polls.load();
  // A demotion directive polls the usage source before it is acknowledged.
  client::Directive demote;
  demote.id = 21;
  demote.kind = client::Directive::Kind::kDemote;
  demote.bytes = kMiB;
  h.fake->Push(demote);
  ASSERT_TRUE(WaitForAck(h.fake, 21));
  EXPECT_EQ(polls.load(), after);
}

}  // namespace
}  // namespace memvirt::shim

namespace memvirt::shim {
namespace {

constexpr char kUuid2[] = "GPU-00000000-1111-2222-3333-555555555555";

// Issue 13, item 2: one process, several devices. Each device's core registers its GPU through
// its own view; a budget directive for GPU 1 reaches only device 1's core, and reports carry the
// usage of each GPU with allocation hints naming their GPU.
TEST(DaemonControlPlaneDevicesTest, EachDeviceHasItsOwnBudgetUsageAndDirectives) {
  Harness h(/*reachable=*/true);
  ControlPlane* dev0 = h.plane->ForDevice(0);
  ControlPlane* dev1 = h.plane->ForDevice(1);
  ASSERT_NE(dev0, dev1);
  EXPECT_EQ(h.plane->ForDevice(1), dev1);
  EXPECT_EQ(dev0->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB), 64 * kMiB);
  EXPECT_EQ(dev1->InitialDeviceBudget({kUuid2, 2048 * kMiB}, 1800 * kMiB), 48 * kMiB);
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    ASSERT_EQ(h.fake->added.size(), 1u);  // one registration, the second GPU added to it
    EXPECT_EQ(h.fake->added[0].gpu_uuid, kUuid2);
    EXPECT_EQ(h.fake->added[0].device_memory_bytes, 2048 * kMiB);
  }
  std::atomic<uint64_t> applied0{0}, applied1{0};
  auto source = [](uint64_t resident) {
    return [resident] {
      UsageReport u;
      u.device_resident_bytes = resident;
      u.alloc_events = {{.alloc_id = 4096, .bytes = resident}};
      return u;
    };
  };
  dev0->SetUsageSource(source(10 * kMiB));
  dev1->SetUsageSource(source(20 * kMiB));
  dev0->OnBudgetChange([&](uint64_t bytes) { applied0 = bytes; });
  dev1->OnBudgetChange([&](uint64_t bytes) { applied1 = bytes; });
  EXPECT_EQ(dev1->spill_tier(), nullptr);  // the fake daemon has no NVMe tier

  h.fake->Push(BudgetDirective(31, 32 * kMiB, kUuid2));
  ASSERT_TRUE(WaitForAck(h.fake, 31));
  EXPECT_EQ(applied1.load(), 32 * kMiB);
  EXPECT_EQ(applied0.load(), 0u);  // device 0's core never heard of it
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    EXPECT_TRUE(h.fake->acks[31].first);
    EXPECT_EQ(h.fake->acks[31].second, 20 * kMiB);  // device 1's usage
  }
  h.fake->Push(BudgetDirective(32, 8 * kMiB, kUuid));
  ASSERT_TRUE(WaitForAck(h.fake, 32));
  EXPECT_EQ(applied0.load(), 8 * kMiB);
  EXPECT_EQ(applied1.load(), 32 * kMiB);
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    EXPECT_FALSE(h.fake->acks[32].first);  // 10 MiB resident on device 0
  }

  client::HintBatch batch;
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    for (const client::HintBatch& b : h.fake->batches) {
      if (b.allocs.size() == 2) batch = b;
    }
    return batch.allocs.size() == 2;
  }));
  std::map<std::string, uint64_t> resident;
  for (const client::GpuUsage& u : batch.usage) resident[u.gpu_uuid] = u.resident_bytes;
  EXPECT_EQ(resident[kUuid], 10 * kMiB);
  EXPECT_EQ(resident[kUuid2], 20 * kMiB);
  std::map<std::string, uint64_t> alloc_id;
  for (const client::AllocHint& a : batch.allocs) alloc_id[a.gpu_uuid] = a.alloc_id;
  EXPECT_EQ(alloc_id[kUuid], 4096u);
  EXPECT_EQ(alloc_id[kUuid2], 4096u | (1ull << 56));  // distinct ids per process
}

// Note [several devices]: the host budget is the process's, so its directives reach every
// device's core: HOST_BUDGET each core, DEMOTE the cores in order until the bytes are moved; an
// acknowledgement judges the host bytes of all the GPUs together.
TEST(DaemonControlPlaneDevicesTest, HostTierDirectivesReachEveryDevicesCore) {
  Harness h(/*reachable=*/true);
  ControlPlane* dev0 = h.plane->ForDevice(0);
  ControlPlane* dev1 = h.plane->ForDevice(1);
  dev0->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  dev1->InitialDeviceBudget({kUuid2, 2048 * kMiB}, 1800 * kMiB);
  std::atomic<uint64_t> host0{0}, host1{0};  // each core's host-tier bytes
  std::atomic<uint64_t> budget0{0}, budget1{0}, demote0{0}, demote1{0};
  auto source = [](std::atomic<uint64_t>* host) {
    return [host] {
      UsageReport u;
      u.host_resident_bytes = host->load();
      return u;
    };
  };
  dev0->SetUsageSource(source(&host0));
  dev1->SetUsageSource(source(&host1));
  dev0->OnHostTierControl({[&](uint64_t bytes) { budget0 = bytes; },
                           [&](uint64_t bytes) {
                             demote0 = bytes;
                             return 2 * kMiB;  // could move only one chunk
                           }});
  dev1->OnHostTierControl({[&](uint64_t bytes) { budget1 = bytes; },
                           [&](uint64_t bytes) {
                             demote1 = bytes;
                             return bytes;
                           }});
  host0 = 40 * kMiB;
  host1 = 40 * kMiB;
  client::Directive host;
  host.id = 41;
  host.kind = client::Directive::Kind::kHostBudget;
  host.budget_bytes = 64 * kMiB;
  h.fake->Push(host);
  ASSERT_TRUE(WaitForAck(h.fake, 41));
  EXPECT_EQ(budget0.load(), 64 * kMiB);
  EXPECT_EQ(budget1.load(), 64 * kMiB);
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    EXPECT_FALSE(h.fake->acks[41].first);  // 80 MiB on the two GPUs together
  }
  host1 = 20 * kMiB;
  host.id = 42;
  h.fake->Push(host);
  ASSERT_TRUE(WaitForAck(h.fake, 42));
  {
    std::lock_guard<std::mutex> lock(h.fake->mu_);
    EXPECT_TRUE(h.fake->acks[42].first);  // 60 MiB together
  }

  client::Directive demote;
  demote.id = 43;
  demote.kind = client::Directive::Kind::kDemote;
  demote.bytes = 8 * kMiB;
  h.fake->Push(demote);
  ASSERT_TRUE(WaitForAck(h.fake, 43));
  EXPECT_EQ(demote0.load(), 8 * kMiB);
  EXPECT_EQ(demote1.load(), 6 * kMiB);  // the rest, from the second core
  std::lock_guard<std::mutex> lock(h.fake->mu_);
  EXPECT_TRUE(h.fake->acks[43].first);
}

TEST(DaemonControlPlaneDevicesTest, APendingGpuWaitsForItsFirstUsableBudget) {
  Harness h(/*reachable=*/true);
  ASSERT_EQ(h.plane->ForDevice(0)->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB),
            64 * kMiB);
  h.fake->add_grant = 0;  // the daemon says pending
  const uint64_t polls_before = h.fake->budget_polls.load();
  std::thread daemon([&] {
    // The link asks while the GPU is pending: it waits (the others acknowledge their shrinks
    // meanwhile).
    while (h.fake->budget_polls.load() < polls_before + 3) std::this_thread::yield();
    h.fake->Grant(kUuid2, 24 * kMiB);
  });
  // The grant that came later: the link waited for it.
  EXPECT_EQ(h.plane->ForDevice(1)->InitialDeviceBudget({kUuid2, 2048 * kMiB}, 1800 * kMiB),
            24 * kMiB);
  daemon.join();
}

TEST(DaemonControlPlaneDevicesTest, AGpuTheDaemonDoesNotAddRunsWithItsLocalBudget) {
  Harness h(/*reachable=*/true);
  h.plane->ForDevice(0)->InitialDeviceBudget({kUuid, 1024 * kMiB}, 900 * kMiB);
  h.fake->add_supported = false;  // an older daemon
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(h.plane->ForDevice(1)->InitialDeviceBudget({kUuid2, 2048 * kMiB}, 1800 * kMiB),
            1800 * kMiB);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // no admission wait
}

}  // namespace
}  // namespace memvirt::shim

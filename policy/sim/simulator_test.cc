#include "memvirt/policy/simulator.h"

#include <gtest/gtest.h>

namespace memvirt::policy {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// 1 GB/s = 1000 bytes/us: one 1 MiB block takes 1048.576 us on any link.
constexpr double kBlockUs = 1048.576;

trace::Trace MakeTrace(std::vector<trace::TraceTensor> tensors,
                       std::vector<trace::TraceKernel> kernels) {
  trace::Trace t;
  t.model = "test";
  t.tensors = std::move(tensors);
  t.kernels = std::move(kernels);
  return t;
}

SimConfig Config(PolicyKind policy, uint64_t device, int iterations = 1) {
  SimConfig c;
  c.policy = policy;
  c.device_bytes = device;
  c.host_bytes = 1ull << 40;
  c.pcie_gbps = 1;
  c.ssd_gbps = 1;
  c.chunk_bytes = kMiB;
  c.iterations = iterations;
  return c;
}

// Two persistent 1 MiB weights A, B (they start on the host); k0 reads A,
// k1 reads B, each 2000 us; both fit on the device.
trace::Trace TwoReads() {
  return MakeTrace({{0, kMiB, "weight", true}, {1, kMiB, "weight", true}},
                   {{0, "k0", 2000, {0}, {}}, {1, "k1", 2000, {1}, {}}});
}

TEST(SimulatorTest, DemandFetchStallsTheKernel) {
  // LRU: A fetched on demand at t=0 (ready 1048.576), k0 runs to 3048.576;
  // B fetched on demand then, ready 4097.152; k1 ends 6097.152.
  auto r = Simulate(TwoReads(), Config(PolicyKind::kLru, 2 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->ideal_us, 4000);
  EXPECT_NEAR(r->reported.time_us, 4000 + 2 * kBlockUs, 1e-6);
  EXPECT_NEAR(r->reported.stall_us, 2 * kBlockUs, 1e-6);
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);
  EXPECT_EQ(r->reported.d2h_bytes, 0u);
  EXPECT_EQ(r->reported.prefetches, 0u);
}

TEST(SimulatorTest, PrefetchOverlapsTransferWithCompute) {
  // Belady: A on demand (stall 1048.576); at k0's start B is prefetched on
  // the idle H2D engine, ready at 2097.152 < k0's end 3048.576: k1 does not
  // wait. Total 4000 + 1048.576. (3 MiB of device memory: the lookahead
  // plans to fill only part of it, Note [window hysteresis].)
  SimConfig c = Config(PolicyKind::kBelady, 3 * kMiB);
  c.belady_lookahead = true;
  auto r = Simulate(TwoReads(), c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->reported.time_us, 4000 + kBlockUs, 1e-6);
  EXPECT_NEAR(r->reported.stall_us, kBlockUs, 1e-6);
  EXPECT_EQ(r->reported.prefetches, 1u);
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);
  EXPECT_NE(FormatResultJson(*r, c).find("\"prefetch\":true"), std::string::npos);
}

TEST(SimulatorTest, BeladyIsDemandOnlyByDefault) {
  // The default belady run is the traffic bound (Note [Belady bound]): both
  // blocks fetched on demand, as for LRU: 4000 + 2 x 1048.576.
  const SimConfig c = Config(PolicyKind::kBelady, 3 * kMiB);
  auto r = Simulate(TwoReads(), c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->reported.time_us, 4000 + 2 * kBlockUs, 1e-6);
  EXPECT_EQ(r->reported.prefetches, 0u);
  EXPECT_EQ(r->reported.demand_fetches, 2u);
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);
  EXPECT_NE(FormatResultJson(*r, c).find("\"prefetch\":false"), std::string::npos);
}

TEST(SimulatorTest, WriteBackThenFetchAccounting) {
  // One 1 MiB device slot. k0 writes X, k1 writes Y, k2 reads X, k3 reads Y
  // (1000 us each); X and Y die after their last use. LRU:
  //   k0: X needs no data, runs 0..1000.
  //   k1: evict X (dirty): D2H 1000..2048.576; Y's memory usable then;
  //       k1 runs 2048.576..3048.576.
  //   k2: evict Y (dirty): D2H 3048.576..4097.152; X fetched H2D
  //       4097.152..5145.728; k2 runs to 6145.728. X dies.
  //   k3: Y fetched 6145.728..7194.304; k3 runs to 8194.304.
  trace::Trace t = MakeTrace({{0, kMiB, "activation", false}, {1, kMiB, "activation", false}},
                             {{0, "k0", 1000, {}, {0}},
                              {1, "k1", 1000, {}, {1}},
                              {2, "k2", 1000, {0}, {}},
                              {3, "k3", 1000, {1}, {}}});
  auto r = Simulate(t, Config(PolicyKind::kLru, kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->reported.time_us, 8194.304, 1e-6);
  EXPECT_NEAR(r->reported.stall_us, 4 * kBlockUs, 1e-6);
  EXPECT_EQ(r->reported.d2h_bytes, 2 * kMiB);
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);
  EXPECT_EQ(r->reported.ssd_write_bytes, 0u);
  EXPECT_EQ(r->peak_live_bytes, 2 * kMiB);

  // Without host memory the same traffic goes through SSD as well: D2H
  // then the SSD write engine, SSD read then H2D, so it takes longer.
  SimConfig no_host = Config(PolicyKind::kLru, kMiB);
  no_host.host_bytes = 0;
  auto s = Simulate(t, no_host);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->reported.ssd_write_bytes, 2 * kMiB);
  EXPECT_EQ(s->reported.ssd_read_bytes, 2 * kMiB);
  EXPECT_GT(s->reported.time_us, r->reported.time_us);
}

TEST(SimulatorTest, DeadDataIsDroppedNotWrittenBack) {
  // X is written (k0), read (k1), then overwritten (k3) before any read.
  // Y is written at k2 and needs X's slot. LRU writes X back; Belady sees
  // that X's data is dead and drops it.
  trace::Trace t = MakeTrace({{0, kMiB, "gradient", true}, {1, kMiB, "activation", false}},
                             {{0, "k0", 1000, {}, {0}},
                              {1, "k1", 1000, {0}, {}},
                              {2, "k2", 1000, {}, {1}},
                              {3, "k3", 1000, {}, {0}},
                              {4, "k4", 1000, {0}, {}}});
  auto lru = Simulate(t, Config(PolicyKind::kLru, kMiB));
  auto belady = Simulate(t, Config(PolicyKind::kBelady, kMiB));
  ASSERT_TRUE(lru.ok() && belady.ok());
  EXPECT_EQ(lru->reported.d2h_bytes, kMiB);
  // LRU's write back of X is overwritten unread: waste, and counted as such.
  EXPECT_EQ(lru->reported.write_back_unread_bytes, kMiB);
  EXPECT_EQ(belady->reported.d2h_bytes, 0u);
  EXPECT_EQ(belady->reported.write_back_unread_bytes, 0u);
  EXPECT_EQ(belady->reported.dead_drops, 1u);
  EXPECT_EQ(belady->reported.h2d_bytes, 0u);  // the overwrite needs no fetch
}

TEST(SimulatorTest, UnlimitedMemoryReachesIdealAfterWarmup) {
  for (PolicyKind p : {PolicyKind::kLru, PolicyKind::kLifetime, PolicyKind::kBelady}) {
    auto r = Simulate(TwoReads(), Config(p, 64 * kMiB, 3));
    ASSERT_TRUE(r.ok());
    EXPECT_DOUBLE_EQ(r->reported.time_us, r->ideal_us);
    EXPECT_DOUBLE_EQ(r->slowdown, 1.0);
    EXPECT_EQ(r->reported.h2d_bytes + r->reported.d2h_bytes, 0u);
    ASSERT_EQ(r->per_iteration.size(), 3u);
    EXPECT_GT(r->per_iteration[0].h2d_bytes, 0u);
  }
}

// A small training-like loop: 6 layers, weights reused forward and
// backward, activations saved for backward, gradients written in backward.
trace::Trace TrainingLoop() {
  trace::Trace t;
  const int layers = 6;
  uint64_t id = 0;
  std::vector<uint64_t> w, a, g;
  for (int l = 0; l < layers; ++l) {
    w.push_back(id);
    t.tensors.push_back({id++, 3 * kMiB, "weight", true});
    a.push_back(id);
    t.tensors.push_back({id++, 4 * kMiB, "activation", false});
    g.push_back(id);
    t.tensors.push_back({id++, 3 * kMiB, "gradient", false});
  }
  uint64_t k = 0;
  for (int l = 0; l < layers; ++l) t.kernels.push_back({k++, "fwd", 3000, {w[l]}, {a[l]}});
  for (int l = layers - 1; l >= 0; --l) {
    t.kernels.push_back({k++, "bwd", 5000, {w[l], a[l]}, {g[l]}});
    t.kernels.push_back({k++, "opt", 500, {g[l], w[l]}, {w[l]}});
  }
  return t;
}

// TrainingLoop() (60 MiB of tensors) on a 20 MiB device with a 4 GB/s
// link: paging on the critical path.
SimConfig PressuredLoop(PolicyKind policy, int iterations) {
  SimConfig c = Config(policy, 20 * kMiB, iterations);
  c.pcie_gbps = 4;
  return c;
}

absl::StatusOr<SimResult> SimulateAs(const trace::Trace& t, SimConfig c, PolicyKind policy) {
  c.policy = policy;
  return Simulate(t, c);
}

TEST(SimulatorTest, LifetimeBeatsLruAndStaysCloseToBelady) {
  const trace::Trace t = TrainingLoop();
  const SimConfig c = PressuredLoop(PolicyKind::kLru, 3);
  auto lru = Simulate(t, c);
  auto lifetime = SimulateAs(t, c, PolicyKind::kLifetime);
  auto belady = SimulateAs(t, c, PolicyKind::kBelady);
  ASSERT_TRUE(lru.ok() && lifetime.ok() && belady.ok());
  EXPECT_LT(lifetime->reported.time_us, lru->reported.time_us);
  const auto traffic = [](const SimResult& r) {
    return r.reported.h2d_bytes + r.reported.d2h_bytes + r.reported.ssd_read_bytes +
           r.reported.ssd_write_bytes;
  };
  // Belady here is the demand-only bound: it never beats lifetime on time.
  EXPECT_LE(lifetime->reported.time_us, belady->reported.time_us);
  EXPECT_LE(static_cast<double>(traffic(*lifetime)), 1.2 * static_cast<double>(traffic(*belady)));
}

// Near the limit the lifetime policy writes back only what it reads back
// (Note [residency plan]): no write back is overwritten, freed or dropped
// unread, and once the first (LRU-managed) iteration's state is gone the
// traffic is the demand MIN bound's, in less time.
TEST(SimulatorTest, LifetimeWritesBackOnlyWhatIsReadBack) {
  const trace::Trace t = TrainingLoop();
  SimConfig c = PressuredLoop(PolicyKind::kLifetime, 4);
  auto lifetime = Simulate(t, c);
  auto belady = SimulateAs(t, c, PolicyKind::kBelady);
  ASSERT_TRUE(lifetime.ok() && belady.ok());
  for (const IterationStats& s : lifetime->per_iteration) EXPECT_EQ(s.write_back_unread_bytes, 0u);
  const IterationStats& steady = lifetime->per_iteration.back();
  EXPECT_GT(steady.d2h_bytes, 0u);
  EXPECT_EQ(steady.d2h_bytes, belady->reported.d2h_bytes);
  EXPECT_EQ(steady.h2d_bytes, belady->reported.h2d_bytes);
  EXPECT_LT(steady.time_us, belady->reported.time_us);
  // Without the plan the same run evicts ahead by farthest next use at
  // decision time and moves more.
  c.plan_residency = false;
  auto unplanned = Simulate(t, c);
  ASSERT_TRUE(unplanned.ok());
  EXPECT_GT(unplanned->reported.h2d_bytes + unplanned->reported.d2h_bytes,
            steady.h2d_bytes + steady.d2h_bytes);
}

// Note [uvm model]: faults cost a latency per batch; pages migrate (a clean
// block is written back when evicted); dead data stays mapped until evicted.
TEST(SimulatorTest, UvmFaultsMigrateAndKeepDeadDataMapped) {
  // TwoReads with room for both: A faults in (256 pages: one batch, 5 us)
  // and k0 runs 1053.576..3053.576; B the same: k1 ends 6107.152.
  auto r = Simulate(TwoReads(), Config(PolicyKind::kUvm, 2 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->policy, "uvm");
  EXPECT_NEAR(r->reported.time_us, 4000 + 2 * (kBlockUs + 5), 1e-6);
  EXPECT_EQ(r->reported.faults, 512u);
  // Room for one block: k1 evicts A. LRU drops it (its host copy is valid);
  // UVM moved it, so it writes it back.
  auto lru = Simulate(TwoReads(), Config(PolicyKind::kLru, kMiB));
  auto uvm = Simulate(TwoReads(), Config(PolicyKind::kUvm, kMiB));
  ASSERT_TRUE(lru.ok() && uvm.ok());
  EXPECT_EQ(lru->reported.d2h_bytes, 0u);
  EXPECT_EQ(uvm->reported.d2h_bytes, kMiB);
  // X is written (k0) and read (k1), then dies; Y (k2) needs its room. LRU
  // frees X; UVM keeps it mapped and writes it back to make room, and in
  // the next iteration X's rebirth needs no fetch.
  trace::Trace t = MakeTrace({{0, kMiB, "activation", false}, {1, kMiB, "activation", false}},
                             {{0, "k0", 1000, {}, {0}},
                              {1, "k1", 1000, {0}, {}},
                              {2, "k2", 1000, {}, {1}},
                              {3, "k3", 1000, {1}, {}}});
  auto lru_dead = Simulate(t, Config(PolicyKind::kLru, kMiB, 2));
  auto uvm_dead = Simulate(t, Config(PolicyKind::kUvm, kMiB, 2));
  ASSERT_TRUE(lru_dead.ok() && uvm_dead.ok());
  EXPECT_EQ(lru_dead->reported.d2h_bytes, 0u);
  EXPECT_EQ(uvm_dead->reported.d2h_bytes, 2 * kMiB);  // X at k2, Y at k0
  EXPECT_EQ(uvm_dead->reported.h2d_bytes, 0u);
  // Neither write back is ever read: Y's is dropped at its rebirth (k2),
  // X's at its rebirth in the next iteration (carried).
  EXPECT_EQ(uvm_dead->reported.write_back_unread_bytes, kMiB);
  EXPECT_EQ(uvm_dead->reported.write_back_carried_bytes, kMiB);
}

// Note [G10 iterations]: with uvm_migrate_reborn a rebirth off the device
// migrates its old pages back, so (the device being full) every page that
// leaves comes back: fetched = written back, as in G10's second iteration.
TEST(SimulatorTest, UvmRebirthMigratesBackWhenAsked) {
  trace::Trace t = MakeTrace({{0, kMiB, "activation", false}, {1, kMiB, "activation", false}},
                             {{0, "k0", 1000, {}, {0}},
                              {1, "k1", 1000, {0}, {}},
                              {2, "k2", 1000, {}, {1}},
                              {3, "k3", 1000, {1}, {}}});
  SimConfig c = Config(PolicyKind::kUvm, kMiB, 2);
  c.uvm_migrate_reborn = true;
  auto r = Simulate(t, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);          // X at k0, Y at k2
  EXPECT_EQ(r->reported.d2h_bytes, 2 * kMiB);          // Y at k0, X at k2
  EXPECT_EQ(r->reported.write_back_unread_bytes, 0u);  // both read back by their rebirth
  // The first iteration allocated both fresh: nothing to fetch.
  EXPECT_EQ(r->per_iteration[0].h2d_bytes, 0u);
}

TEST(SimulatorTest, DeterministicOutput) {
  trace::Trace t = TrainingLoop();
  for (PolicyKind p : {PolicyKind::kLifetime, PolicyKind::kUvm}) {
    SimConfig c = Config(p, 20 * kMiB, 2);
    auto a = Simulate(t, c);
    auto b = Simulate(t, c);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(FormatResultJson(*a, c), FormatResultJson(*b, c));
    EXPECT_NE(FormatResultJson(*a, c).find("\"slowdown\":"), std::string::npos);
  }
}

TEST(SimulatorTest, RejectsKernelLargerThanDeviceAndBadConfig) {
  auto r = Simulate(TwoReads(), Config(PolicyKind::kLru, kMiB / 2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  SimConfig c = Config(PolicyKind::kLru, kMiB);
  c.iterations = 0;
  EXPECT_EQ(Simulate(TwoReads(), c).status().code(), absl::StatusCode::kInvalidArgument);
  c = Config(PolicyKind::kLru, kMiB);
  c.pcie_gbps = 0;
  EXPECT_EQ(Simulate(TwoReads(), c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParsePolicyKind("fifo").ok());
  EXPECT_EQ(*ParsePolicyKind("uvm"), PolicyKind::kUvm);
  c = Config(PolicyKind::kUvm, kMiB);
  c.uvm_fault_batch_pages = 0;
  EXPECT_EQ(Simulate(TwoReads(), c).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParsePolicyKind("lifetime"), PolicyKind::kLifetime);
}

}  // namespace
}  // namespace memvirt::policy

// Note [shim mechanism] in simulator.cc and ShimClock (shim_clock.h):
// hand-derived timings of the shim's synchronous paging.
#include <gtest/gtest.h>

#include "memvirt/policy/simulator.h"
#include "shim_clock.h"

namespace memvirt::policy {
namespace {

constexpr uint64_t kMiB = 1 << 20;
// 1 GB/s = 1000 bytes/us: one 1 MiB block takes 1048.576 us on the link.
constexpr double kBlockUs = 1048.576;

trace::Trace MakeTrace(std::vector<trace::TraceTensor> tensors,
                       std::vector<trace::TraceKernel> kernels) {
  trace::Trace t;
  t.model = "test";
  t.tensors = std::move(tensors);
  t.kernels = std::move(kernels);
  return t;
}

SimConfig Mechanism(PolicyKind policy, uint64_t device) {
  SimConfig c;
  c.policy = policy;
  c.device_bytes = device;
  c.host_bytes = 1ull << 40;
  c.pcie_gbps = 1;
  c.ssd_gbps = 1;
  c.chunk_bytes = kMiB;
  c.iterations = 1;
  c.shim_mechanism = true;
  return c;
}

TEST(ShimClockTest, UnmapIsImmediateAndCopiesShareOneStream) {
  ShimClock clock(/*bytes_per_us=*/1000, /*remap_us=*/5);
  EXPECT_DOUBLE_EQ(clock.Launch(0, 100), 0);  // kernel [0, 100)
  EXPECT_DOUBLE_EQ(clock.Copy(10000), 10);    // the host is at 0: [0, 10)
  EXPECT_DOUBLE_EQ(clock.Copy(10000), 20);    // behind the first copy
  EXPECT_DOUBLE_EQ(clock.host(), 0);          // neither blocks the host
  clock.Map();
  EXPECT_DOUBLE_EQ(clock.host(), 5);
  clock.Unmap();  // does not wait for the kernel: 5 us
  EXPECT_DOUBLE_EQ(clock.host(), 10);
  clock.Drain();  // a synchronization does
  EXPECT_DOUBLE_EQ(clock.host(), 100);
  EXPECT_DOUBLE_EQ(clock.Launch(/*ready=*/200, 10), 200);  // waits for its fill
  EXPECT_DOUBLE_EQ(clock.compute_end(), 210);
}

// Two persistent 1 MiB weights A, B (on the host at the start); k0 reads A,
// k1 reads B, 2000 us each; the device holds one of them.
trace::Trace TwoReads() {
  return MakeTrace({{0, kMiB, "weight", true}, {1, kMiB, "weight", true}},
                   {{0, "k0", 2000, {0}, {}}, {1, "k1", 2000, {1}, {}}});
}

TEST(ShimMechanismTest, EvictionWaitsForTheVictimAndWritesItBack) {
  // k0: A paged in [0, kBlockUs), k0 runs to 2000 + kBlockUs; the host goes
  // on at 0. k1: no room; A is in use until k0 ends, so the host waits for
  // it, writes A back (the shim keeps no clean copy) until 2000 + 2 x
  // kBlockUs, unmaps, pages B in until 2000 + 3 x kBlockUs; k1 then runs.
  auto r = Simulate(TwoReads(), Mechanism(PolicyKind::kLru, kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->reported.time_us, 4000 + 3 * kBlockUs, 1e-6);
  EXPECT_NEAR(r->reported.stall_us, 3 * kBlockUs, 1e-6);
  EXPECT_EQ(r->reported.h2d_bytes, 2 * kMiB);
  EXPECT_EQ(r->reported.d2h_bytes, kMiB);
  EXPECT_EQ(r->reported.evictions, 1u);
  // On overlapping engines the clean A is dropped and B's fetch is the
  // only stall after k0.
  SimConfig engines = Mechanism(PolicyKind::kLru, kMiB);
  engines.shim_mechanism = false;
  auto e = Simulate(TwoReads(), engines);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->reported.d2h_bytes, 0u);
  EXPECT_NEAR(e->reported.time_us, 4000 + 2 * kBlockUs, 1e-6);
}

TEST(ShimMechanismTest, EvictionTakesThePolicysFirstChoiceEvenWhileItIsInUse) {
  // Weights X, Y, Z, W (1 MiB each, on the host); the device holds two;
  // kernels of 100 us read X, Y, Z, W, Y. Belady evicts X for Z (the host
  // waits for k0 and for X's write-back: it is at 3 x kBlockUs, when Y's k1
  // has ended and Z's k2 is queued), then Z for W: Z is still in use, Y is
  // idle but read again next. Waiting for Z keeps Y resident (Note [eviction]
  // in shim/core/shim_core.h); taking the idle Y instead would page it in
  // again for k4.
  const trace::Trace t = MakeTrace({{0, kMiB, "weight", true},
                                    {1, kMiB, "weight", true},
                                    {2, kMiB, "weight", true},
                                    {3, kMiB, "weight", true}},
                                   {{0, "k0", 100, {0}, {}},
                                    {1, "k1", 100, {1}, {}},
                                    {2, "k2", 100, {2}, {}},
                                    {3, "k3", 100, {3}, {}},
                                    {4, "k4", 100, {1}, {}}});
  auto r = Simulate(t, Mechanism(PolicyKind::kBelady, 2 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reported.h2d_bytes, 4 * kMiB);  // each weight once
  EXPECT_EQ(r->reported.d2h_bytes, 2 * kMiB);  // X and Z
  EXPECT_EQ(r->reported.evictions, 2u);
}

TEST(ShimMechanismTest, PageInOverlapsQueuedKernels) {
  // Room for both. k0 (10000 us) runs after A's page-in (an unmap and a map
  // of 10 us each, then kBlockUs); B's page-in unmaps B's host mapping
  // without waiting for k0 (Note [unmap is immediate] in
  // sim/src/api_vmm.cc), so B's copy runs behind A's, during k0, and k1
  // follows k0: 20 + kBlockUs + 10000 + 2000.
  const trace::Trace t = MakeTrace({{0, kMiB, "weight", true}, {1, kMiB, "weight", true}},
                                   {{0, "k0", 10000, {0}, {}}, {1, "k1", 2000, {1}, {}}});
  SimConfig c = Mechanism(PolicyKind::kLru, 2 * kMiB);
  c.shim_remap_us = 10;  // an unmap and a map per page-in
  auto r = Simulate(t, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NEAR(r->reported.time_us, 12000 + kBlockUs + 2 * 10, 1e-6);
  EXPECT_EQ(r->reported.d2h_bytes, 0u);
}

TEST(ShimMechanismTest, NewBlocksTakeFreedChunksWithoutTraffic) {
  // X (2 MiB activation) is written by k0 and freed after k1; Y (2 MiB) is
  // born at k2 on X's chunks, still mapped: no eviction, no reclaim.
  trace::Trace t =
      MakeTrace({{0, 2 * kMiB, "activation", false},
                 {1, 2 * kMiB, "activation", false},
                 {2, kMiB, "weight", true}},
                {{0, "k0", 100, {}, {0}}, {1, "k1", 100, {0}, {}}, {2, "k2", 100, {2}, {1}}});
  t.frees = {{0, 1}};
  auto r = Simulate(t, Mechanism(PolicyKind::kLru, 3 * kMiB));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reported.evictions, 0u);
  EXPECT_EQ(r->reported.d2h_bytes, 0u);
  EXPECT_EQ(r->reported.h2d_bytes, kMiB);  // the weight's page-in only
}

TEST(ShimMechanismTest, PrologueRunsOnceAndOnlyOnPersistentTensors) {
  // k0 writes persistent A once (prologue); the iterations run k1 only.
  trace::Trace t = MakeTrace({{0, kMiB, "weight", true}, {1, kMiB, "activation", false}},
                             {{0, "init", 0, {}, {0}}, {1, "k1", 500, {0}, {1}}});
  SimConfig c = Mechanism(PolicyKind::kLifetime, 2 * kMiB);
  c.iterations = 3;
  c.prologue_kernels = 1;
  auto r = Simulate(t, c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->ideal_us, 500);
  EXPECT_EQ(r->per_iteration.size(), 3u);
  EXPECT_NEAR(r->reported.time_us, 500, 1e-6);  // everything stays resident
  // A prologue touching a non-persistent tensor, or without the mechanism,
  // is rejected.
  trace::Trace bad = t;
  bad.kernels[0].writes = {1};
  EXPECT_FALSE(Simulate(bad, c).ok());
  c.shim_mechanism = false;
  EXPECT_FALSE(Simulate(t, c).ok());
  // Nor with belady (its future has no prologue), nor uvm with the mechanism.
  c.shim_mechanism = true;
  c.policy = PolicyKind::kBelady;
  EXPECT_FALSE(Simulate(t, c).ok());
  c.prologue_kernels = 0;
  c.policy = PolicyKind::kUvm;
  EXPECT_FALSE(Simulate(t, c).ok());
}

TEST(ShimMechanismTest, DeterministicOutput) {
  // A loop that pages every iteration: same input, same bytes out.
  std::vector<trace::TraceTensor> tensors;
  std::vector<trace::TraceKernel> kernels;
  for (uint64_t i = 0; i < 6; ++i) tensors.push_back({i, kMiB, "weight", true});
  for (uint64_t k = 0; k < 12; ++k) {
    kernels.push_back({k, "k", 300.0 + 10 * k, {k % 6, (k + 2) % 6}, {(k + 1) % 6}});
  }
  const trace::Trace t = MakeTrace(tensors, kernels);
  for (PolicyKind p : {PolicyKind::kLru, PolicyKind::kLifetime}) {
    SimConfig c = Mechanism(p, 4 * kMiB);
    c.iterations = 3;
    auto a = Simulate(t, c);
    auto b = Simulate(t, c);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(FormatResultJson(*a, c), FormatResultJson(*b, c));
    EXPECT_GT(a->reported.h2d_bytes, 0u);
    // Every page-in was paid for by an eviction or free room; nothing
    // written back is lost: d2h bytes are all eventually read or carried.
    EXPECT_GE(a->reported.time_us, a->ideal_us);
  }
}

}  // namespace
}  // namespace memvirt::policy

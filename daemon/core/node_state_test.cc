#include "daemon/core/node_state.h"

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "daemon/core/mutex_lock.h"
#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr char kGpu[] = "GPU-00000000-0000-0000-0000-000000000001";

class RecordingSink : public DirectiveSink {
 public:
  void OnRegistered(const RegisterResult& r) override {
    registered = true;
    result = r;
  }
  void OnDirective(const Directive& d) override {
    EXPECT_TRUE(registered) << "directive before Registered";
    for (const std::string& uuid : adding) {
      EXPECT_NE(d.gpu_uuid, uuid) << "directive for an added GPU before GpusAdded";
    }
    directives.push_back(d);
  }
  void OnGpusAdded(const std::vector<GpuBudget>& budgets) override {
    added.push_back(budgets);
    adding.clear();
  }
  // Latest budget the client was told for kGpu.
  uint64_t Budget() const {
    uint64_t b = result.budgets.empty() ? 0 : result.budgets[0].budget_bytes;
    for (const Directive& d : directives) {
      if (d.kind == Directive::Kind::kBudget) b = d.budget_bytes;
    }
    return b;
  }
  bool registered = false;
  RegisterResult result;
  std::vector<Directive> directives;
  std::vector<std::vector<GpuBudget>> added;  // one entry per OnGpusAdded
  std::vector<std::string> adding;            // set by a test before AddGpus
};

PeerCredentials Peer(pid_t pid, uid_t uid = 1000) { return {.pid = pid, .uid = uid, .gid = uid}; }
const PeerCredentials kRoot{.pid = 1, .uid = 0, .gid = 0};

Registration OneGpu(uint64_t device_bytes, uint64_t demand = 0, uint64_t min = 0) {
  Registration r;
  r.protocol_version = 1;
  r.gpus.push_back({kGpu, device_bytes, demand, min});
  return r;
}

class NodeStateTest : public ::testing::Test {
 protected:
  NodeOptions Options() {
    NodeOptions o;
    o.reserve_bytes = 100 * kMiB;
    o.shrink_deadline = absl::Seconds(1);
    o.gpu_size_trusted_uids = {1000};
    return o;
  }
  uint64_t HeldSum(NodeState& node) {
    auto s = node.GetStatus(kRoot);
    EXPECT_TRUE(s.ok());
    // A learned GPU is forgotten with its last client: then nothing is held on it.
    return s->gpus.empty() ? 0 : s->gpus.at(0).budget_sum_bytes;
  }
  void AckLastShrink(NodeState& node, ClientId id, RecordingSink& sink) {
    for (auto it = sink.directives.rbegin(); it != sink.directives.rend(); ++it) {
      if (it->kind == Directive::Kind::kBudget && it->deadline > std::chrono::milliseconds(0)) {
        ASSERT_TRUE(node.Acknowledge(id, {.directive_id = it->id, .complied = true}).ok());
        return;
      }
    }
    FAIL() << "no shrink to acknowledge";
  }
  FakeClock clock_;
};

TEST_F(NodeStateTest, FirstClientGetsAllButReserve) {
  NodeState node(Options(), &clock_);
  RecordingSink sink;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &sink);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(sink.registered);
  EXPECT_EQ(sink.result.pid, 10);
  EXPECT_EQ(sink.Budget(), 900 * kMiB);
  EXPECT_TRUE(sink.directives.empty());
}

TEST_F(NodeStateTest, NewcomerGetsShareAfterOthersShrink) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b;
  auto ida = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  auto idb = node.Register(Peer(11), OneGpu(1000 * kMiB), &b);
  ASSERT_TRUE(ida.ok() && idb.ok());
  // A is told to shrink to half at once; B may only use what nobody holds.
  ASSERT_EQ(a.directives.size(), 1u);
  EXPECT_EQ(a.directives[0].budget_bytes, 450 * kMiB);
  EXPECT_GT(a.directives[0].deadline, std::chrono::milliseconds(0));
  EXPECT_EQ(b.Budget(), 0u);
  EXPECT_LE(HeldSum(node), 900 * kMiB);
  // After A complies, B grows to its share.
  AckLastShrink(node, *ida, a);
  EXPECT_EQ(b.Budget(), 450 * kMiB);
  EXPECT_EQ(HeldSum(node), 900 * kMiB);
}

// Issue 14, item 3 (Note [admission]): a newcomer is never told a budget it cannot run with.
// Every BUDGET it receives, in the registration answer or a directive, is 0 with `pending` or at
// least its floor.
void ExpectOnlyUsableBudgets(const RecordingSink& sink, uint64_t floor) {
  ASSERT_EQ(sink.result.budgets.size(), 1u);
  const GpuBudget& answer = sink.result.budgets[0];
  if (answer.pending) {
    EXPECT_EQ(answer.budget_bytes, 0u);
  } else {
    EXPECT_GE(answer.budget_bytes, floor);
  }
  for (const Directive& d : sink.directives) {
    if (d.kind == Directive::Kind::kBudget) {
      EXPECT_GE(d.budget_bytes, floor);
    }
  }
}

TEST_F(NodeStateTest, ANewcomerWaitsForItsFloorWhileOthersHoldTheMemory) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b, c;
  auto ida = node.Register(Peer(10), OneGpu(1000 * kMiB, 450 * kMiB), &a);
  auto idb = node.Register(Peer(11), OneGpu(1000 * kMiB, 450 * kMiB), &b);
  ASSERT_TRUE(ida.ok() && idb.ok());
  EXPECT_EQ(a.Budget() + b.Budget(), 900 * kMiB);
  // C's floor is 250 MiB; its share is 300 MiB, taken from A and B by shrinks not yet
  // acknowledged: the answer says pending.
  auto idc = node.Register(Peer(12), OneGpu(1000 * kMiB, 0, 250 * kMiB), &c);
  ASSERT_TRUE(idc.ok());
  ASSERT_EQ(c.result.budgets.size(), 1u);
  EXPECT_TRUE(c.result.budgets[0].pending);
  EXPECT_EQ(c.result.budgets[0].budget_bytes, 0u);
  // A's acknowledgement frees 150 MiB: reserved for C, but below its floor, so not announced.
  AckLastShrink(node, *ida, a);
  EXPECT_TRUE(c.directives.empty());
  EXPECT_LE(HeldSum(node), 900 * kMiB);
  auto status = node.GetClient(kRoot, 12);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gpus.at(0).budget_bytes, 0u);
  // B's frees the rest: one directive with the whole share.
  AckLastShrink(node, *idb, b);
  ASSERT_EQ(c.directives.size(), 1u);
  EXPECT_EQ(c.directives[0].budget_bytes, 300 * kMiB);
  EXPECT_EQ(c.directives[0].deadline, std::chrono::milliseconds(0));
  ExpectOnlyUsableBudgets(c, 250 * kMiB);
  EXPECT_EQ(HeldSum(node), 900 * kMiB);
}

TEST_F(NodeStateTest, ANewcomerInTheRestartGracePeriodIsPendingUntilItEnds) {
  NodeOptions o = Options();
  o.restart_grace = absl::Seconds(2);
  NodeState node(o, &clock_);
  RecordingSink a;
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000 * kMiB, 0, 16 * kMiB), &a).ok());
  ASSERT_EQ(a.result.budgets.size(), 1u);
  EXPECT_TRUE(a.result.budgets[0].pending);
  clock_.Advance(absl::Seconds(3));
  node.Tick();
  EXPECT_EQ(a.Budget(), 900 * kMiB);
  ExpectOnlyUsableBudgets(a, 16 * kMiB);
}

TEST_F(NodeStateTest, ANewcomerOnADrainedGpuIsPendingUntilUndrained) {
  NodeState node(Options(), &clock_);
  RecordingSink first;
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000 * kMiB), &first).ok());
  ASSERT_TRUE(node.Drain(kRoot, kGpu, false).ok());
  RecordingSink late;
  ASSERT_TRUE(node.Register(Peer(11), OneGpu(1000 * kMiB, 0, 8 * kMiB), &late).ok());
  EXPECT_TRUE(late.result.budgets.at(0).pending);
  EXPECT_TRUE(late.directives.empty());
  AckLastShrink(node, 1, first);
  ASSERT_TRUE(node.Drain(kRoot, kGpu, true).ok());
  EXPECT_EQ(late.Budget(), 450 * kMiB);
  ExpectOnlyUsableBudgets(late, 8 * kMiB);
}

TEST_F(NodeStateTest, ARunningProcessThatReRegistersIsNotPending) {
  NodeOptions o = Options();
  o.restart_grace = absl::Seconds(2);
  NodeState node(o, &clock_);
  RecordingSink a;
  Registration r = OneGpu(1000 * kMiB, 0, 16 * kMiB);
  r.usage.push_back({.gpu_uuid = kGpu, .resident_bytes = 100 * kMiB});
  ASSERT_TRUE(node.Register(Peer(10), r, &a).ok());
  EXPECT_FALSE(a.result.budgets.at(0).pending);
  EXPECT_EQ(a.Budget(), 100 * kMiB);
}

TEST_F(NodeStateTest, UnregisterReclaimsBudgetForOthers) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b;
  auto ida = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  auto idb = node.Register(Peer(11), OneGpu(1000 * kMiB), &b);
  AckLastShrink(node, *ida, a);
  node.Unregister(*ida);
  EXPECT_EQ(b.Budget(), 900 * kMiB);
  auto s = node.GetStatus(kRoot);
  ASSERT_EQ(s->clients.size(), 1u);
  EXPECT_EQ(s->clients[0].creds.pid, 11);
  EXPECT_EQ(s->totals.clients_reclaimed, 1u);
  node.Unregister(*idb);
  node.Unregister(*idb);  // Idempotent.
  EXPECT_EQ(HeldSum(node), 0u);
}

TEST_F(NodeStateTest, UnackedShrinkBecomesOverdueAndStaysHeld) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b;
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000 * kMiB), &a).ok());
  ASSERT_TRUE(node.Register(Peer(11), OneGpu(1000 * kMiB), &b).ok());
  node.Tick();
  EXPECT_FALSE(node.GetStatus(kRoot)->clients[0].gpus[0].shrink_overdue);
  clock_.Advance(absl::Seconds(2));
  node.Tick();
  auto s = node.GetStatus(kRoot);
  EXPECT_TRUE(s->clients[0].gpus[0].shrink_overdue);
  EXPECT_EQ(s->totals.shrinks_overdue, 1u);
  EXPECT_EQ(b.Budget(), 0u);  // Never over-commit for a non-compliant client.
  EXPECT_LE(HeldSum(node), 900 * kMiB);
}

TEST_F(NodeStateTest, ThreeClientsNeverOvercommitWhateverTheAckOrder) {
  NodeState node(Options(), &clock_);
  RecordingSink s[3];
  ClientId ids[3];
  for (int i = 0; i < 3; ++i) {
    auto id = node.Register(Peer(10 + i), OneGpu(1000 * kMiB), &s[i]);
    ASSERT_TRUE(id.ok());
    ids[i] = *id;
    EXPECT_LE(HeldSum(node), 900 * kMiB);
  }
  // Only the first client holds more than its share; the others grow once it complies.
  EXPECT_EQ(s[1].Budget(), 0u);
  EXPECT_EQ(s[2].Budget(), 0u);
  AckLastShrink(node, ids[0], s[0]);
  EXPECT_LE(HeldSum(node), 900 * kMiB);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s[i].Budget(), 300 * kMiB) << i;
}

TEST_F(NodeStateTest, ReRegistrationHoldsCurrentResidencyUntilAck) {
  NodeOptions o = Options();
  o.restart_grace = absl::Seconds(2);
  NodeState node(o, &clock_);
  RecordingSink a, b;
  Registration ra = OneGpu(1000 * kMiB);
  ra.usage.push_back({.gpu_uuid = kGpu, .resident_bytes = 800 * kMiB});
  Registration rb = OneGpu(1000 * kMiB);
  rb.usage.push_back({.gpu_uuid = kGpu, .resident_bytes = 100 * kMiB});
  auto ida = node.Register(Peer(10), ra, &a);
  auto idb = node.Register(Peer(11), rb, &b);
  ASSERT_TRUE(ida.ok() && idb.ok());
  EXPECT_LE(HeldSum(node), 900 * kMiB);
  EXPECT_EQ(a.Budget(), 450 * kMiB);
  EXPECT_EQ(b.Budget(), 100 * kMiB);  // Grace period: no growth beyond residency.
  AckLastShrink(node, *ida, a);
  EXPECT_EQ(b.Budget(), 100 * kMiB);
  clock_.Advance(absl::Seconds(3));
  node.Tick();
  EXPECT_EQ(b.Budget(), 450 * kMiB);
  EXPECT_EQ(HeldSum(node), 900 * kMiB);
}

TEST_F(NodeStateTest, SetQuotaRequiresOperatorAndCaps) {
  NodeState node(Options(), &clock_);
  RecordingSink a;
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000 * kMiB), &a).ok());
  EXPECT_EQ(node.SetQuota(Peer(99), 10, kGpu, 10 * kMiB).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(node.SetQuota(Peer(10), 10, kGpu, 10 * kMiB).status().code(),
            absl::StatusCode::kPermissionDenied);
  auto t = node.SetQuota(kRoot, 10, kGpu, 200 * kMiB);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, 200 * kMiB);
  EXPECT_EQ(a.Budget(), 200 * kMiB);
  EXPECT_EQ(node.SetQuota(kRoot, 12345, kGpu, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(node.SetQuota(kRoot, 0, kGpu, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.SetQuota(kRoot, 10, "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.SetQuota(kRoot, 10, kGpu, kMaxBytes + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(node.SetQuota(kRoot, 10, kGpu, 0).ok());  // Remove the quota.
  EXPECT_EQ(a.Budget(), 900 * kMiB);
}

TEST_F(NodeStateTest, AdminGroupMayOperate) {
  NodeOptions o = Options();
  o.admin_gid = 4242;
  NodeState node(o, &clock_);
  RecordingSink a;
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000 * kMiB), &a).ok());
  PeerCredentials admin{.pid = 5, .uid = 1001, .gid = 1001, .groups = {4242}};
  EXPECT_TRUE(node.SetQuota(admin, 10, kGpu, 10 * kMiB).ok());
}

TEST_F(NodeStateTest, DrainMovesEveryoneOffAndUndrainRestores) {
  NodeState node(Options(), &clock_);
  RecordingSink a;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  EXPECT_FALSE(node.Drain(Peer(10), kGpu, false).ok());
  auto n = node.Drain(kRoot, kGpu, false);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  EXPECT_EQ(a.Budget(), 0u);
  RecordingSink late;
  ASSERT_TRUE(node.Register(Peer(11), OneGpu(1000 * kMiB), &late).ok());
  EXPECT_EQ(late.Budget(), 0u);
  AckLastShrink(node, *id, a);
  ASSERT_TRUE(node.Drain(kRoot, kGpu, true).ok());
  EXPECT_EQ(a.Budget() + late.Budget(), 900 * kMiB);
  EXPECT_EQ(node.Drain(kRoot, "GPU-unknown", false).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(NodeStateTest, UsersSeeOnlyTheirOwnClients) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b;
  ASSERT_TRUE(node.Register(Peer(10, 1000), OneGpu(1000 * kMiB), &a).ok());
  ASSERT_TRUE(node.Register(Peer(11, 1001), OneGpu(1000 * kMiB), &b).ok());
  auto s = node.GetStatus(Peer(50, 1000));
  ASSERT_EQ(s->clients.size(), 1u);
  EXPECT_EQ(s->clients[0].creds.pid, 10);
  EXPECT_EQ(node.GetStatus(kRoot)->clients.size(), 2u);
  EXPECT_TRUE(node.GetClient(Peer(50, 1000), 10).ok());
  EXPECT_EQ(node.GetClient(Peer(50, 1000), 11).status().code(), absl::StatusCode::kNotFound);
}

// Issue 14, item 2: a GPU's size comes from a trusted source; no claim changes it.
TEST_F(NodeStateTest, AnUntrustedProcessCannotDeclareAnUnknownGpusSize) {
  NodeState node(Options(), &clock_);
  RecordingSink sink;
  auto id = node.Register(Peer(10, 2000), OneGpu(1), &sink);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition) << id.status();
  EXPECT_FALSE(sink.registered);
  EXPECT_TRUE(node.GetStatus(kRoot)->gpus.empty());
  // Root may (the shim reports what the driver says).
  RecordingSink root_sink;
  ASSERT_TRUE(node.Register({.pid = 11, .uid = 0, .gid = 0}, OneGpu(1000 * kMiB), &root_sink).ok());
  EXPECT_EQ(node.GetStatus(kRoot)->gpus.at(0).device_memory_bytes, 1000 * kMiB);
}

TEST_F(NodeStateTest, ClaimsThatDisagreeWithTheKnownSizeChangeNothingForOthers) {
  NodeOptions o = Options();
  o.gpus = {{kGpu, 1000 * kMiB}};
  NodeState node(o, &clock_);
  RecordingSink tiny, huge, honest;
  auto a = node.Register(Peer(10, 2000), OneGpu(1), &tiny);  // claims a 1-byte GPU
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(tiny.Budget(), 900 * kMiB);  // the configured size minus the reserve
  auto b = node.Register(Peer(11, 2001), OneGpu(kMaxBytes), &huge);  // 1 PiB
  ASSERT_TRUE(b.ok()) << b.status();
  AckLastShrink(node, *a, tiny);
  auto c = node.Register(Peer(12, 2002), OneGpu(1000 * kMiB), &honest);
  ASSERT_TRUE(c.ok()) << c.status();
  AckLastShrink(node, *a, tiny);
  AckLastShrink(node, *b, huge);
  auto status = node.GetStatus(kRoot);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gpus.at(0).device_memory_bytes, 1000 * kMiB);
  EXPECT_LE(HeldSum(node), 900 * kMiB);
  EXPECT_EQ(honest.Budget(), 300 * kMiB);  // a fair third, as if everyone had told the truth
  EXPECT_EQ(tiny.Budget(), 300 * kMiB);
  EXPECT_EQ(huge.Budget(), 300 * kMiB);
}

TEST_F(NodeStateTest, ALearnedSizeIsKeptWhateverLaterClaimsSay) {
  NodeState node(Options(), &clock_);
  RecordingSink first, liar;
  auto a = node.Register(Peer(10), OneGpu(1000 * kMiB), &first);  // trusted uid 1000
  ASSERT_TRUE(a.ok());
  auto b = node.Register(Peer(11, 2000), OneGpu(1), &liar);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(node.GetStatus(kRoot)->gpus.at(0).device_memory_bytes, 1000 * kMiB);
  AckLastShrink(node, *a, first);
  EXPECT_EQ(first.Budget(), 450 * kMiB);
  EXPECT_EQ(liar.Budget(), 450 * kMiB);
}

// Issue 14, item 6: made-up UUIDs do not accumulate.
TEST_F(NodeStateTest, LearnedGpusAreForgottenWhenUnusedAndBounded) {
  NodeOptions o = Options();
  o.gpus = {{kGpu, 1000 * kMiB}};
  NodeState node(o, &clock_);
  for (int i = 0; i < 200; ++i) {
    RecordingSink sink;
    Registration r = OneGpu(1000 * kMiB);
    r.gpus[0].gpu_uuid = "GPU-made-up-" + std::to_string(i);
    auto id = node.Register(Peer(100 + i), r, &sink);
    ASSERT_TRUE(id.ok()) << id.status();
    node.Unregister(*id);
  }
  auto status = node.GetStatus(kRoot);
  ASSERT_EQ(status->gpus.size(), 1u);  // only the configured one, which is never forgotten
  EXPECT_EQ(status->gpus[0].gpu_uuid, kGpu);

  // At most kMaxLearnedGpus learned GPUs at once, however many clients hold them.
  std::vector<std::unique_ptr<RecordingSink>> sinks;
  for (size_t i = 0; i < kMaxLearnedGpus; ++i) {
    sinks.push_back(std::make_unique<RecordingSink>());
    Registration r = OneGpu(1000 * kMiB);
    r.gpus[0].gpu_uuid = "GPU-held-" + std::to_string(i);
    ASSERT_TRUE(node.Register(Peer(1000 + static_cast<pid_t>(i)), r, sinks.back().get()).ok());
  }
  RecordingSink extra;
  Registration r = OneGpu(1000 * kMiB);
  r.gpus[0].gpu_uuid = "GPU-one-too-many";
  EXPECT_EQ(node.Register(Peer(5000), r, &extra).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A configured GPU is still open to everyone.
  EXPECT_TRUE(node.Register(Peer(5001, 2000), OneGpu(1000 * kMiB), &extra).ok());
  EXPECT_EQ(node.GetStatus(kRoot)->gpus.size(), kMaxLearnedGpus + 1);
}

// Issue 14, item 8: reported counters cannot wrap or inflate the node's totals.
TEST_F(NodeStateTest, ImplausiblePagingCountersAreNotCountedAndTotalsNeverGoDown) {
  NodeState node(Options(), &clock_);
  RecordingSink a;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  ASSERT_TRUE(id.ok());
  uint64_t iteration = 0;
  auto report = [&](uint64_t paged_in) {
    HintBatch h;
    h.iteration = ++iteration;
    h.usage = {{.gpu_uuid = kGpu, .paged_in_bytes = paged_in}};
    EXPECT_TRUE(node.ReportHints(*id, h).ok());
    return node.GetStatus(kRoot)->totals;
  };
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(report(100 * kMiB).paged_in_bytes, 100 * kMiB);
  clock_.Advance(absl::Seconds(1));
  NodeTotals t = report(UINT64_MAX);  // the probe's report
  EXPECT_EQ(t.paged_in_bytes, 100 * kMiB);
  EXPECT_EQ(t.implausible_reports, 1u);
  clock_.Advance(absl::Seconds(1));
  t = report(50 * kMiB);  // back down: not a negative delta either
  EXPECT_EQ(t.paged_in_bytes, 100 * kMiB);
  clock_.Advance(absl::Seconds(1));
  t = report(80 * kMiB);  // plausible again from the new baseline
  EXPECT_EQ(t.paged_in_bytes, 130 * kMiB);
  EXPECT_EQ(t.implausible_reports, 2u);
  // Large plausible deltas (long intervals, counter reset in between) saturate, never wrap.
  uint64_t last = t.paged_in_bytes;
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Hours(10000));
    t = report(uint64_t{1} << 63);
    EXPECT_GE(t.paged_in_bytes, last);
    last = t.paged_in_bytes;
    t = report(0);
  }
  EXPECT_EQ(t.paged_in_bytes, UINT64_MAX);
}

TEST_F(NodeStateTest, RejectsMalformedRegistrations) {
  NodeState node(Options(), &clock_);
  RecordingSink sink;
  auto code = [&](const Registration& r) {
    return node.Register(Peer(10), r, &sink).status().code();
  };
  EXPECT_EQ(code(Registration{}), absl::StatusCode::kInvalidArgument);
  Registration r = OneGpu(1000 * kMiB);
  r.gpus[0].gpu_uuid = "";
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(0);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(kMaxBytes + 1);
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(1000, 100, 200);  // min > demand
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(1000);
  r.gpus.push_back(r.gpus[0]);  // duplicate uuid
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(1000);
  r.gpus[0].gpu_uuid = "GPU with spaces";
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  r = OneGpu(1000);
  r.usage.push_back({.gpu_uuid = "GPU-other"});
  EXPECT_EQ(code(r), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(sink.registered);
  EXPECT_EQ(node.client_count(), 0u);
  ASSERT_TRUE(node.Register(Peer(10), OneGpu(1000), &sink).ok());
  RecordingSink dup;
  EXPECT_EQ(node.Register(Peer(10), OneGpu(1000), &dup).status().code(),
            absl::StatusCode::kAlreadyExists);
}

constexpr char kGpu2[] = "GPU-00000000-0000-0000-0000-000000000002";

// Issue 13, item 2: one process, several GPUs. A registered process adds a second GPU; its
// budget there is per (process, GPU), announced in OnGpusAdded before any directive for it,
// arbitrated with the others on that GPU only, and the status lists the process on both.
TEST_F(NodeStateTest, ARegisteredProcessAddsAGpuWithItsOwnBudget) {
  NodeState node(Options(), &clock_);
  RecordingSink a, b;
  auto ida = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  ASSERT_TRUE(ida.ok());
  Registration on2;
  on2.gpus.push_back({kGpu2, 2000 * kMiB, 0, 0});
  auto idb = node.Register(Peer(11), on2, &b);  // B alone on GPU 2: all of it but the reserve
  ASSERT_TRUE(idb.ok());
  EXPECT_EQ(b.Budget(), 1900 * kMiB);
  const size_t a_before = a.directives.size();

  a.adding = {kGpu2};
  ASSERT_TRUE(node.AddGpus(*ida, {{kGpu2, 2000 * kMiB, 0, 16 * kMiB}}).ok());
  ASSERT_EQ(a.added.size(), 1u);
  ASSERT_EQ(a.added[0].size(), 1u);
  EXPECT_EQ(a.added[0][0].gpu_uuid, kGpu2);
  // B has not acknowledged its shrink yet: A's share on GPU 2 is pending, not a sliver.
  EXPECT_TRUE(a.added[0][0].pending);
  EXPECT_EQ(a.added[0][0].budget_bytes, 0u);
  EXPECT_EQ(a.directives.size(), a_before);  // nothing changed on GPU 1
  AckLastShrink(node, *idb, b);
  EXPECT_EQ(b.Budget(), 950 * kMiB);
  ASSERT_EQ(a.directives.size(), a_before + 1);
  EXPECT_EQ(a.directives.back().gpu_uuid, kGpu2);
  EXPECT_EQ(a.directives.back().budget_bytes, 950 * kMiB);

  auto status = node.GetClient(kRoot, 10);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->gpus.size(), 2u);
  std::map<std::string, uint64_t> budget_of;
  for (const ClientGpuSnapshot& g : status->gpus) budget_of[g.gpu_uuid] = g.budget_bytes;
  EXPECT_EQ(budget_of[kGpu], 900 * kMiB);  // GPU 1 untouched
  EXPECT_EQ(budget_of[kGpu2], 950 * kMiB);
  // Usage for the added GPU is accepted and reported per GPU.
  ASSERT_TRUE(
      node.ReportHints(*ida, {.usage = {{.gpu_uuid = kGpu2, .resident_bytes = 7 * kMiB}}}).ok());
  status = node.GetClient(kRoot, 10);
  ASSERT_TRUE(status.ok());
  for (const ClientGpuSnapshot& g : status->gpus) {
    EXPECT_EQ(g.usage.resident_bytes, g.gpu_uuid == kGpu2 ? 7 * kMiB : 0u) << g.gpu_uuid;
  }
  // Leaving gives both GPUs back.
  node.Unregister(*ida);
  EXPECT_EQ(b.Budget(), 1900 * kMiB);
}

TEST_F(NodeStateTest, AddingGpusRejectsWhatRegisterWouldAndChangesNothing) {
  NodeState node(Options(), &clock_);
  RecordingSink a;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  ASSERT_TRUE(id.ok());
  auto code = [&](std::vector<GpuClaim> claims) { return node.AddGpus(*id, claims).code(); };
  EXPECT_EQ(code({}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{kGpu, 1000 * kMiB, 0, 0}}), absl::StatusCode::kInvalidArgument);  // has it
  EXPECT_EQ(code({{kGpu2, 1000 * kMiB, 0, 0}, {kGpu2, 1000 * kMiB, 0, 0}}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{kGpu2, 0, 0, 0}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{"not a uuid", 1000 * kMiB, 0, 0}}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.AddGpus(*id + 1, {{kGpu2, 1000 * kMiB, 0, 0}}).code(),
            absl::StatusCode::kNotFound);
  std::vector<GpuClaim> many;
  for (int i = 0; i < static_cast<int>(kMaxGpusPerClient); ++i) {
    many.push_back({absl::StrFormat("GPU-00000000-0000-0000-0000-%012d", 100 + i), kMiB, 0, 0});
  }
  EXPECT_EQ(code(many), absl::StatusCode::kInvalidArgument);  // 17 in all
  // An untrusted uid may not declare an unknown GPU's size, here either.
  RecordingSink u;
  auto untrusted = node.Register(Peer(20, 2000), OneGpu(1000 * kMiB), &u);
  ASSERT_TRUE(untrusted.ok());
  EXPECT_EQ(node.AddGpus(*untrusted, {{kGpu2, 1000 * kMiB, 0, 0}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(a.added.empty());
  EXPECT_TRUE(u.added.empty());
  auto status = node.GetClient(kRoot, 10);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->gpus.size(), 1u);
}

TEST_F(NodeStateTest, HintsTrackAllocationsUsageAndRates) {
  NodeState node(Options(), &clock_);
  RecordingSink a;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  HintBatch h;
  h.iteration = 1;
  h.allocs = {{1, kGpu, 10 * kMiB, false}, {2, kGpu, 20 * kMiB, false}};
  h.usage = {{.gpu_uuid = kGpu, .resident_bytes = 30 * kMiB, .paged_in_bytes = 0}};
  ASSERT_TRUE(node.ReportHints(*id, h).ok());
  clock_.Advance(absl::Seconds(2));
  h.iteration = 2;
  h.allocs = {{1, "", 0, true}};
  h.usage = {{.gpu_uuid = kGpu,
              .resident_bytes = 20 * kMiB,
              .host_bytes = 5 * kMiB,
              .paged_in_bytes = 8 * kMiB,
              .paged_out_bytes = 4 * kMiB}};
  ASSERT_TRUE(node.ReportHints(*id, h).ok());
  auto c = node.GetClient(kRoot, 10);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->live_allocations, 1u);
  EXPECT_EQ(c->live_allocation_bytes, 20 * kMiB);
  EXPECT_EQ(c->iteration, 2u);
  EXPECT_DOUBLE_EQ(c->gpus[0].page_in_bytes_per_second, 4.0 * kMiB);
  EXPECT_DOUBLE_EQ(c->gpus[0].page_out_bytes_per_second, 2.0 * kMiB);
  auto s = node.GetStatus(kRoot);
  EXPECT_EQ(s->host_used_bytes, 5 * kMiB);
  EXPECT_EQ(s->totals.paged_in_bytes, 8 * kMiB);
  // Invalid batches change nothing.
  HintBatch bad;
  bad.iteration = 3;
  bad.usage = {{.gpu_uuid = "GPU-unregistered"}};
  EXPECT_EQ(node.ReportHints(*id, bad).code(), absl::StatusCode::kInvalidArgument);
  bad.usage.clear();
  bad.iteration = 1;
  EXPECT_EQ(node.ReportHints(*id, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.Acknowledge(*id, {.directive_id = 999}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.ReportHints(*id + 100, h).code(), absl::StatusCode::kNotFound);
  node.Unregister(*id);
  EXPECT_EQ(node.GetStatus(kRoot)->host_used_bytes, 0u);
}

TEST_F(NodeStateTest, HostTierIsSharedAndReclaimed) {
  NodeOptions o = Options();
  o.host_capacity_bytes = 1000 * kMiB;
  NodeState node(o, &clock_);
  RecordingSink a, b;
  auto ida = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  EXPECT_EQ(a.result.host_budget_bytes, 1000 * kMiB);
  ASSERT_TRUE(node.Register(Peer(11), OneGpu(1000 * kMiB), &b).ok());
  EXPECT_EQ(b.result.host_budget_bytes, 500 * kMiB);
  bool told = false;
  for (const Directive& d : a.directives) {
    if (d.kind == Directive::Kind::kHostBudget) told = d.budget_bytes == 500 * kMiB;
  }
  EXPECT_TRUE(told);
  node.Unregister(*ida);
  EXPECT_EQ(b.directives.back().kind, Directive::Kind::kHostBudget);
  EXPECT_EQ(b.directives.back().budget_bytes, 1000 * kMiB);
}

TEST_F(NodeStateTest, HostTierOverBudgetGetsOneDemoteAtATime) {
  NodeOptions o = Options();
  o.host_capacity_bytes = 100 * kMiB;
  NodeState node(o, &clock_);
  RecordingSink a;
  auto id = node.Register(Peer(10), OneGpu(1000 * kMiB), &a);
  HintBatch h;
  h.iteration = 1;
  h.usage = {{.gpu_uuid = kGpu, .host_bytes = 150 * kMiB}};
  ASSERT_TRUE(node.ReportHints(*id, h).ok());
  ASSERT_EQ(a.directives.size(), 1u);
  EXPECT_EQ(a.directives[0].kind, Directive::Kind::kDemote);
  EXPECT_EQ(a.directives[0].bytes, 50 * kMiB);
  ASSERT_TRUE(node.ReportHints(*id, h).ok());
  EXPECT_EQ(a.directives.size(), 1u) << "no second request while one is outstanding";
  ASSERT_TRUE(node.Acknowledge(*id, {.directive_id = a.directives[0].id, .complied = true}).ok());
  h.usage[0].host_bytes = 90 * kMiB;
  ASSERT_TRUE(node.ReportHints(*id, h).ok());
  EXPECT_EQ(a.directives.size(), 1u) << "within budget now";
}

// Sink safe to read from its owner's thread while other threads' calls deliver to it.
class LockedSink : public DirectiveSink {
 public:
  void OnRegistered(const RegisterResult&) override {}
  void OnDirective(const Directive& d) override {
    MutexLock lock(&mu_);
    last_id_ = d.id;
  }
  uint64_t last_id() {
    MutexLock lock(&mu_);
    return last_id_;
  }

 private:
  absl::Mutex mu_;
  uint64_t last_id_ = 0;
};

TEST_F(NodeStateTest, ConcurrentCallersKeepLedgerConsistent) {
  NodeState node(Options(), &clock_);
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        LockedSink sink;
        auto id = node.Register(Peer(1000 + t), OneGpu(1000 * kMiB), &sink);
        ASSERT_TRUE(id.ok()) << id.status();
        HintBatch h;
        h.iteration = 1;
        h.usage = {{.gpu_uuid = kGpu, .resident_bytes = kMiB}};
        EXPECT_TRUE(node.ReportHints(*id, h).ok());
        if (const uint64_t d = sink.last_id(); d != 0) {
          EXPECT_TRUE(node.Acknowledge(*id, {.directive_id = d, .complied = true}).ok());
        }
        node.Unregister(*id);
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop) {
      auto s = node.GetStatus(kRoot);
      ASSERT_TRUE(s.ok());
      for (const GpuSnapshot& g : s->gpus) EXPECT_LE(g.budget_sum_bytes, 900 * kMiB);
      node.Tick();
    }
  });
  for (int t = 0; t < 4; ++t) threads[t].join();
  stop = true;
  threads.back().join();
  EXPECT_EQ(node.client_count(), 0u);
  EXPECT_EQ(HeldSum(node), 0u);
}

// Random operation sequences: the ledger never over-commits when clients comply.
TEST_F(NodeStateTest, RandomOperationsKeepLedgerWithinCapacity) {
  std::mt19937 rng(7);
  NodeState node(Options(), &clock_);
  std::map<pid_t, std::pair<ClientId, std::unique_ptr<RecordingSink>>> live;
  for (int step = 0; step < 3000; ++step) {
    const pid_t pid = 100 + rng() % 6;
    auto it = live.find(pid);
    switch (rng() % 4) {
      case 0:
        if (it == live.end()) {
          auto sink = std::make_unique<RecordingSink>();
          auto id = node.Register(Peer(pid),
                                  OneGpu(1000 * kMiB, (rng() % 2) * (rng() % 1000) * kMiB,
                                         (rng() % 3 == 0) * (rng() % 300) * kMiB),
                                  sink.get());
          if (id.ok()) live[pid] = {*id, std::move(sink)};
        }
        break;
      case 1:
        if (it != live.end()) {
          node.Unregister(it->second.first);
          live.erase(it);
        }
        break;
      case 2:
        if (it != live.end() && !it->second.second->directives.empty()) {
          const Directive& d = it->second.second->directives.back();
          ASSERT_TRUE(
              node.Acknowledge(it->second.first, {.directive_id = d.id, .complied = true}).ok());
        }
        break;
      case 3:
        if (it != live.end()) {
          (void)node.SetQuota(kRoot, pid, kGpu, (rng() % 2) * (rng() % 900) * kMiB);
        }
        break;
    }
    ASSERT_LE(HeldSum(node), 900 * kMiB) << "step " << step;
  }
}

}  // namespace
}  // namespace memvirt::daemon

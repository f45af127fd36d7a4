#include <gtest/gtest.h>

#include <map>
#include <random>

#include "memvirt/policy/policy.h"

namespace memvirt::policy {
namespace {

constexpr AccessMode R = AccessMode::kRead;
constexpr AccessMode W = AccessMode::kWrite;

std::vector<StepAccesses> ReadOnly(const std::vector<BlockId>& seq) {
  std::vector<StepAccesses> out;
  for (size_t i = 0; i < seq.size(); ++i) out.push_back({i, {{seq[i], R}}, 1.0});
  return out;
}

// Demand paging of unit-size blocks with `capacity` slots; returns misses.
int DemandMisses(Policy& p, const std::vector<BlockId>& seq, int capacity) {
  std::map<BlockId, bool> resident;
  for (BlockId b : seq) {
    if (!resident.count(b)) {
      p.OnAlloc(b, BlockInfo{1, BlockKind::kActivation, false});
      resident[b] = false;
    }
  }
  int misses = 0, used = 0;
  for (size_t i = 0; i < seq.size(); ++i) {
    const BlockAccess a[] = {{seq[i], R}};
    p.OnAccess(i, a);
    if (resident[seq[i]]) continue;
    ++misses;
    if (used == capacity) {
      auto v = p.PickVictim([&](BlockId b) { return b != seq[i]; });
      EXPECT_TRUE(v.has_value());
      EXPECT_TRUE(resident[*v]);
      resident[*v] = false;
      p.OnEvicted(*v);
      --used;
    }
    resident[seq[i]] = true;
    p.OnResident(seq[i]);
    ++used;
  }
  return misses;
}

// Exhaustive minimum over every eviction choice (blocks are 0..7).
int BruteForceMisses(const std::vector<BlockId>& seq, size_t pos, unsigned resident, int capacity,
                     std::map<std::pair<size_t, unsigned>, int>& memo) {
  if (pos == seq.size()) return 0;
  auto key = std::make_pair(pos, resident);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  const unsigned bit = 1u << seq[pos];
  int best;
  if (resident & bit) {
    best = BruteForceMisses(seq, pos + 1, resident, capacity, memo);
  } else if (__builtin_popcount(resident) < capacity) {
    best = 1 + BruteForceMisses(seq, pos + 1, resident | bit, capacity, memo);
  } else {
    best = 1 << 20;
    for (unsigned v = 0; v < 8; ++v) {
      if (!(resident & (1u << v))) continue;
      best = std::min(
          best, 1 + BruteForceMisses(seq, pos + 1, (resident & ~(1u << v)) | bit, capacity, memo));
    }
  }
  memo[key] = best;
  return best;
}

// Queries between victim choices see the next uses as of the current step,
// although re-ranking waits for the next victim choice (Note [lazy re-rank]
// in planner.h).
TEST(BeladyPolicyTest, PerBlockQueriesSeeStepsNotYetReRanked) {
  std::vector<StepAccesses> future = {
      {0, {{1, R}}, 1}, {1, {{2, R}}, 1}, {2, {{1, R}}, 1}, {3, {{2, W}}, 1}, {4, {{1, R}}, 1}};
  auto p = MakeBeladyPolicy(future);
  for (BlockId b : {1, 2}) {
    p->OnAlloc(b, BlockInfo{1, BlockKind::kActivation, false});
    p->OnResident(b);
  }
  const BlockAccess s0[] = {{1, R}}, s1[] = {{2, R}};
  p->OnAccess(0, s0);
  p->OnAccess(1, s1);
  EXPECT_EQ(p->NextUseDistance(1), 1u);  // step 2
  EXPECT_EQ(p->NextUseDistance(2), 2u);  // step 3 overwrites 2
  EXPECT_TRUE(p->NextAccessOverwrites(2));
  EXPECT_TRUE(p->IsDead(2));
  EXPECT_FALSE(p->IsDead(1));
  EXPECT_EQ(p->PickVictim([](BlockId) { return true; }), 2u);  // dead first
}

TEST(BeladyPolicyTest, MatchesBruteForceMinimumOnSmallSequences) {
  std::mt19937 rng(12345);
  for (int trial = 0; trial < 300; ++trial) {
    const int blocks = 3 + trial % 3;
    const int capacity = 2 + trial % 2;
    std::vector<BlockId> seq(6 + trial % 7);
    for (BlockId& b : seq) b = rng() % blocks;
    auto p = MakeBeladyPolicy(ReadOnly(seq));
    std::map<std::pair<size_t, unsigned>, int> memo;
    const int expected = BruteForceMisses(seq, 0, 0, capacity, memo);
    EXPECT_EQ(DemandMisses(*p, seq, capacity), expected) << "trial " << trial;
  }
}

TEST(BeladyPolicyTest, BeatsLruOnLoopLargerThanMemory) {
  // The cyclic pattern LRU is worst at: every access misses under LRU.
  std::vector<BlockId> seq;
  for (int r = 0; r < 4; ++r)
    for (BlockId b = 0; b < 4; ++b) seq.push_back(b);
  auto lru = MakeLruPolicy();
  auto belady = MakeBeladyPolicy(ReadOnly(seq));
  EXPECT_EQ(DemandMisses(*lru, seq, 3), 16);
  EXPECT_LT(DemandMisses(*belady, seq, 3), 16);
}

TEST(BeladyPolicyTest, DeadBlocksGoFirstAndAreDropped) {
  // Step 0 touches 1 and 2; block 1 is next overwritten (dead), block 2 is
  // read much later, block 3 sooner.
  std::vector<StepAccesses> future = {
      {0, {{1, W}, {2, W}, {3, W}}, 1}, {1, {{3, R}}, 1}, {2, {{1, W}}, 1}, {3, {{2, R}}, 1}};
  auto p = MakeBeladyPolicy(future);
  for (BlockId b : {1, 2, 3}) p->OnAlloc(b, BlockInfo{1, BlockKind::kActivation, false});
  p->OnAccess(0, future[0].accesses);
  for (BlockId b : {1, 2, 3}) p->OnResident(b);
  EXPECT_TRUE(p->IsDead(1));
  EXPECT_FALSE(p->IsDead(2));
  EXPECT_TRUE(p->NextAccessOverwrites(1));
  // Block 1's next use (step 2) is sooner than block 2's, yet it goes first.
  EXPECT_EQ(p->PickVictim([](BlockId) { return true; }), 1u);
  EXPECT_EQ(p->PickVictim([](BlockId b) { return b != 1; }), 2u);
  EXPECT_EQ(p->NextUseDistance(2), 3u);
}

TEST(BeladyPolicyTest, PrefetchVictimMustBeNeededLater) {
  std::vector<StepAccesses> future = {{0, {{1, W}, {2, W}}, 1},
                                      {1, {{3, R}}, 1},
                                      {2, {{1, R}}, 1},
                                      {3, {{4, R}}, 1},
                                      {4, {{2, R}}, 1}};
  auto p = MakeBeladyPolicy(future);
  for (BlockId b : {1, 2, 3, 4}) p->OnAlloc(b, BlockInfo{1, BlockKind::kActivation, false});
  p->OnAccess(0, future[0].accesses);
  p->OnResident(1);
  p->OnResident(2);
  auto any = [](BlockId) { return true; };
  // Bringing in 3 (needed at step 1) may push out 2 (step 4), not 1 first?
  // Both are needed later than 3; the farthest (2) is proposed.
  EXPECT_EQ(p->PickVictimForPrefetch(any, 3), 2u);
  // Bringing in 4 (step 3): only 2 (step 4) is needed later; 1 (step 2) is not.
  EXPECT_EQ(p->PickVictimForPrefetch([](BlockId b) { return b != 2; }, 4), std::nullopt);
}

TEST(BeladyPolicyTest, PrefetchCandidatesInOrderOfNeed) {
  std::vector<StepAccesses> future = {
      {0, {{1, R}}, 10}, {1, {{2, R}, {5, W}}, 10}, {2, {{3, R}, {1, R}}, 10}, {3, {{4, R}}, 10}};
  LifetimeOptions opt;
  opt.default_lookahead_steps = 8;
  auto p = MakeBeladyPolicy(future, opt);
  for (BlockId b : {1, 2, 3, 4, 5}) p->OnAlloc(b, BlockInfo{100, BlockKind::kWeight, true});
  p->OnBudgetChange(10000);
  p->OnAccess(0, future[0].accesses);
  p->OnResident(1);
  std::vector<PrefetchRequest> want = p->PrefetchCandidates(1 << 20);
  // 1 is resident, 5 is overwritten before any read (no data to fetch).
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(want[0].block, 2u);
  EXPECT_EQ(want[0].steps_ahead, 1u);
  EXPECT_EQ(want[1].block, 3u);
  EXPECT_EQ(want[2].block, 4u);
  // A byte limit cuts the list.
  EXPECT_EQ(p->PrefetchCandidates(250).size(), 2u);
}

TEST(BeladyPolicyTest, EvictsAheadOnlyForTheShortHorizon) {
  // 1 byte/us, budget 1000 bytes, 100-byte blocks. Step 0 holds A, B, C
  // (used again at steps 4..6); D is new at step 1 (t = 0 after step 0's
  // end), E new at step 3 (t = 1010); D and E live until step 6. The window ends at step 3 (step 4
  // starts at t = 6010, past 4 x 1000 us). With evict_ahead_slack 0.2 the
  // evict-ahead horizon is 200 us: only D's 100 bytes are made room for now
  // (C, the farthest); with 10 (10000 us) E's too (C, then B).
  constexpr BlockId A = 1, B = 2, C = 3, D = 4, E = 5;
  const std::vector<StepAccesses> future = {{0, {{A, R}, {B, R}, {C, R}}, 1},
                                            {1, {{D, W}}, 10},
                                            {2, {{D, R}}, 1000},
                                            {3, {{E, W}}, 5000},
                                            {4, {{A, R}}, 1},
                                            {5, {{B, R}}, 1},
                                            {6, {{C, R}, {D, R}, {E, R}}, 1}};
  for (double slack : {0.2, 10.0}) {
    LifetimeOptions opt;
    opt.h2d_bytes_per_us = 1;
    opt.lookahead_slack = 4;
    opt.evict_ahead_slack = slack;
    auto p = MakeBeladyPolicy(future, opt);
    for (BlockId b : {A, B, C, D, E}) p->OnAlloc(b, BlockInfo{100, BlockKind::kActivation, false});
    p->OnBudgetChange(1000);
    p->OnAccess(0, future[0].accesses);
    for (BlockId b : {A, B, C}) p->OnResident(b);
    const std::vector<BlockId> ahead = p->EvictAheadCandidates([](BlockId) { return true; }, 0);
    if (slack < 1) {
      EXPECT_EQ(ahead, std::vector<BlockId>({C}));
    } else {
      EXPECT_EQ(ahead, std::vector<BlockId>({C, B}));
    }
    // Free memory covering the need leaves nothing to evict ahead.
    EXPECT_TRUE(p->EvictAheadCandidates([](BlockId) { return true; }, 200).empty());
  }
}

}  // namespace
}  // namespace memvirt::policy

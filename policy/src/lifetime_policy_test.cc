#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "memvirt/policy/policy.h"

namespace memvirt::policy {
namespace {

constexpr AccessMode R = AccessMode::kRead;
constexpr AccessMode W = AccessMode::kWrite;

// One training-like iteration over blocks 1..4:
//   step 0: write 1 (activation)   step 1: read 2 (weight)
//   step 2: read 3 (weight)        step 3: read 1 (last use of 1)
//   step 4: read 4 (weight)
const std::vector<std::vector<BlockAccess>> kIteration = {
    {{1, W}}, {{2, R}}, {{3, R}}, {{1, R}}, {{4, R}}};

void Allocate(Policy& p) {
  p.OnAlloc(1, BlockInfo{10, BlockKind::kActivation, false});
  for (BlockId b : {2, 3, 4}) p.OnAlloc(b, BlockInfo{10, BlockKind::kWeight, true});
}

// Feeds steps [from, to) of the iteration as absolute steps base + i.
void Feed(Policy& p, Step base, size_t from, size_t to) {
  for (size_t i = from; i < to; ++i) {
    p.OnAccess(base + i, kIteration[i]);
    p.OnStepDuration(base + i, 100);
  }
}

auto Any() {
  return [](BlockId) { return true; };
}

TEST(LifetimePolicyTest, BehavesLikeLruBeforeLearning) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  Feed(*p, 0, 0, 3);  // 2 then 3 accessed; 4 is least recent
  EXPECT_EQ(p->PickVictim(Any()), 4u);
  EXPECT_FALSE(p->IsDead(1));
  EXPECT_TRUE(p->PrefetchCandidates(1 << 20).empty());
}

TEST(LifetimePolicyTest, LearnsFromIterationMarkAndEvictsFarthestNextUse) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Feed(*p, 0, 0, 5);
  p->OnIterationMark();
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  // Second iteration, after step 1 (read 2): next uses are 3 at step 2, 4 at
  // step 4, and 2 at step 1 of the next iteration. LRU would pick 3 (2 was
  // just touched); the learned schedule picks 2, needed farthest away.
  Feed(*p, 5, 0, 2);
  EXPECT_EQ(p->PickVictim(Any()), 2u);
  EXPECT_EQ(p->NextUseDistance(3), 1u);
  EXPECT_EQ(p->NextUseDistance(4), 3u);
  EXPECT_EQ(p->NextUseDistance(2), 5u);
}

TEST(LifetimePolicyTest, DetectsIterationWithoutMarks) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Feed(*p, 0, 0, 5);
  // The sequence starts over; after a few repeated steps the policy adopts
  // the first five as the iteration and plans.
  Feed(*p, 5, 0, 3);
  EXPECT_FALSE(p->NextUseDistance(4).has_value());
  Feed(*p, 5, 3, 4);
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  // At step 3 of the second iteration: 4 is needed next (step 4), then 2
  // and 3 in the third iteration.
  EXPECT_EQ(p->NextUseDistance(4), 1u);
  EXPECT_EQ(p->NextUseDistance(2), 3u);
  EXPECT_EQ(p->PickVictim(Any()), 3u);
}

TEST(LifetimePolicyTest, DropsDeadActivationAfterItsLastUse) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Feed(*p, 0, 0, 5);
  p->OnIterationMark();
  p->OnResident(1);
  Feed(*p, 5, 0, 3);
  EXPECT_FALSE(p->IsDead(1));  // still to be read at step 3
  Feed(*p, 5, 3, 4);
  // Its next access is the overwrite at step 0 of the next iteration.
  EXPECT_TRUE(p->IsDead(1));
  EXPECT_TRUE(p->NextAccessOverwrites(1));
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  EXPECT_EQ(p->PickVictim(Any()), 1u);  // dead data goes first
}

TEST(LifetimePolicyTest, PrefetchesUpcomingBlocksInOrder) {
  LifetimeOptions opt;
  opt.default_lookahead_steps = 3;
  auto p = MakeLifetimePolicy(opt);
  Allocate(*p);
  p->OnBudgetChange(1000);
  Feed(*p, 0, 0, 5);
  p->OnIterationMark();
  Feed(*p, 5, 0, 1);  // at step 0; lookahead covers steps 1..3
  std::vector<PrefetchRequest> want = p->PrefetchCandidates(1 << 20);
  // Steps 1..3 read 2, 3 and 1; block 1 belongs to the current step (it is
  // being written now), so only 2 and 3 need fetching.
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(want[0].block, 2u);
  EXPECT_EQ(want[1].block, 3u);
}

TEST(LifetimePolicyTest, PrefetchIntoReusedBufferMatchesReturnedCandidates) {
  LifetimeOptions opt;
  opt.default_lookahead_steps = 3;
  auto p = MakeLifetimePolicy(opt);
  Allocate(*p);
  p->OnBudgetChange(1000);
  Feed(*p, 0, 0, 5);
  p->OnIterationMark();
  Feed(*p, 5, 0, 1);
  std::vector<PrefetchRequest> buffer = {PrefetchRequest{99, 7}};  // stale content
  p->PrefetchCandidatesInto(1 << 20, buffer);
  ASSERT_EQ(buffer.size(), 2u);
  EXPECT_EQ(buffer[0].block, 2u);
  EXPECT_EQ(buffer[1].block, 3u);
  // Room for one block only: the soonest-needed one.
  p->PrefetchCandidatesInto(15, buffer);
  ASSERT_EQ(buffer.size(), 1u);
  EXPECT_EQ(buffer[0].block, 2u);
  // No room: nothing, and the buffer is cleared.
  p->PrefetchCandidatesInto(0, buffer);
  EXPECT_TRUE(buffer.empty());
  EXPECT_TRUE(p->PrefetchCandidates(0).empty());
  // Once 2 is resident only 3 remains.
  p->OnResident(2);
  p->PrefetchCandidatesInto(1 << 20, buffer);
  ASSERT_EQ(buffer.size(), 1u);
  EXPECT_EQ(buffer[0].block, 3u);
}

TEST(LifetimePolicyTest, FallsBackToLruWhenTheSequenceChanges) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  p->OnAlloc(9, BlockInfo{10, BlockKind::kOther, false});
  Feed(*p, 0, 0, 5);
  p->OnIterationMark();
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  const BlockAccess unknown[] = {{9, R}};
  p->OnAccess(5, unknown);
  EXPECT_TRUE(p->PrefetchCandidates(1 << 20).empty());
  EXPECT_FALSE(p->NextUseDistance(2).has_value());
  // LRU order: 2, 3, 4 became resident in that order and none was accessed.
  EXPECT_EQ(p->PickVictim(Any()), 2u);
  // A known step re-synchronizes.
  p->OnAccess(6, kIteration[2]);
  EXPECT_EQ(p->NextUseDistance(4), 2u);
}

}  // namespace
}  // namespace memvirt::policy

namespace memvirt::policy {
namespace {

TEST(LifetimePolicyTest, RecordingIsBoundedForNonPeriodicWork) {
  LifetimeOptions opt;
  opt.max_iteration_steps = 8;
  auto p = MakeLifetimePolicy(opt);
  for (BlockId b = 0; b < 100; ++b) p->OnAlloc(b, BlockInfo{1, BlockKind::kOther, false});
  // Never repeats: nothing is learned, and decisions stay LRU's.
  for (Step s = 0; s < 100; ++s) {
    const BlockAccess a[] = {{s, AccessMode::kRead}};
    p->OnAccess(s, a);
  }
  p->OnResident(5);
  EXPECT_FALSE(p->NextUseDistance(5).has_value());
  EXPECT_EQ(p->PickVictim([](BlockId) { return true; }), 5u);
}

// Note [repeated step]: a step equal to the previous one skips the shadow
// LRU update only while no residency event came in between.
TEST(LifetimePolicyTest, RepeatedStepAfterResidencyEventStillUpdatesLruOrder) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  p->OnResident(2);
  const BlockAccess a[] = {{2, R}};
  p->OnAccess(0, a);
  p->OnResident(3);   // now the most recent: LRU order 2, 3
  p->OnAccess(1, a);  // the same step again: 2 becomes the most recent
  EXPECT_EQ(p->PickVictim(Any()), 3u);
  p->OnAccess(2, kIteration[2]);  // 3: order 2, 3
  p->OnAccess(3, kIteration[2]);  // repeated, no event: order unchanged
  EXPECT_EQ(p->PickVictim(Any()), 2u);
}

// Note [following without a recording]: a step given with duplicate blocks
// fails the fast signature check but is still recognized by its merged form.
TEST(LifetimePolicyTest, FollowsAStepGivenWithDuplicateBlocks) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Feed(*p, 0, 0, 5);
  Feed(*p, 5, 0, 4);  // adopted; at step 3 of the second iteration
  ASSERT_EQ(p->NextUseDistance(4), 1u);
  const BlockAccess dup[] = {{4, R}, {4, R}};  // step 4, block 4 listed twice
  p->OnAccess(9, dup);
  // In sync at step 4: 2 is read at step 1 of the next iteration, 4 at step 4.
  EXPECT_EQ(p->NextUseDistance(2), 2u);
  EXPECT_EQ(p->NextUseDistance(4), 5u);
  p->OnAccess(10, kIteration[0]);  // the expected step follows
  EXPECT_EQ(p->NextUseDistance(2), 1u);
}

// Many launches following the schedule, without any victim choice in
// between, leave every query as if each launch had re-ranked its blocks
// (Note [lazy re-rank] in planner.h).
TEST(LifetimePolicyTest, QueriesAfterManyStepsSeeCurrentNextUses) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  for (BlockId b : {1, 2, 3, 4}) p->OnResident(b);
  for (Step base = 0; base < 50; base += 5) Feed(*p, base, 0, 5);
  // At step 2 of an iteration (3 just read).
  Feed(*p, 50, 0, 3);
  EXPECT_EQ(p->NextUseDistance(1), 1u);  // step 3 reads 1
  EXPECT_EQ(p->NextUseDistance(4), 2u);
  EXPECT_EQ(p->NextUseDistance(2), 4u);  // step 1 of the next iteration
  EXPECT_EQ(p->NextUseDistance(3), 5u);
  EXPECT_FALSE(p->IsDead(1));  // read again at step 3
  // Farthest next use first: 3, then 2.
  EXPECT_EQ(p->PickVictim(Any()), 3u);
  EXPECT_EQ(p->PickVictim([](BlockId b) { return b != 3; }), 2u);
}

// Cyclic steps 0:{1,2} 1:{3} 2:{1} over blocks 1..3, 10 bytes each, room for
// two: MIN keeps 1 throughout and has 2 and 3 off between their uses.
const std::vector<std::vector<BlockAccess>> kCyclic = {{{1, R}, {2, R}}, {{3, R}}, {{1, R}}};

// A lifetime policy that has seen one kCyclic iteration (not yet marked);
// *step is the next step.
std::unique_ptr<Policy> AfterOneCyclicIteration(Step* step) {
  auto p = MakeLifetimePolicy();
  for (BlockId b : {1, 2, 3}) p->OnAlloc(b, BlockInfo{10, BlockKind::kWeight, true});
  p->OnBudgetChange(20);
  *step = 0;
  for (const auto& s : kCyclic) p->OnAccess((*step)++, s);
  return p;
}

// Near the limit, data leaves the device only where MIN lets it leave (Note
// [residency plan]).
TEST(LifetimePolicyTest, EvictsAheadOnlyWhatMinEvicts) {
  const std::vector<std::vector<BlockAccess>>& iteration = kCyclic;
  Step step = 0;
  auto p = AfterOneCyclicIteration(&step);
  p->OnIterationMark();
  p->OnResident(1);
  p->OnResident(2);
  p->OnAccess(step++, iteration[0]);
  // After step 0, 2 is not needed before the next iteration and MIN has it
  // off; 1 (needed at step 2, after 3) is kept, though farther than 3.
  EXPECT_EQ(p->EvictAheadCandidates(Any(), 0), std::vector<BlockId>{2});
  EXPECT_EQ(p->PickVictimForPrefetch(Any(), 3), 2u);
  EXPECT_EQ(p->PickVictimForPrefetch([](BlockId b) { return b != 2; }, 3), std::nullopt);
  p->OnEvicted(2);
  EXPECT_TRUE(p->EvictAheadCandidates(Any(), 0).empty());
  // A kept block is still a victim when nothing else can go (demand).
  EXPECT_EQ(p->PickVictim(Any()), 1u);
  // Without the plan, the farthest next use at decision time goes ahead:
  // 1 (step 2) before 3 arrives (step 1).
  LifetimeOptions unplanned;
  unplanned.plan_residency = false;
  auto q = MakeLifetimePolicy(unplanned);
  for (BlockId b : {1, 2, 3}) q->OnAlloc(b, BlockInfo{10, BlockKind::kWeight, true});
  q->OnBudgetChange(20);
  step = 0;
  for (const auto& s : iteration) q->OnAccess(step++, s);
  q->OnIterationMark();
  q->OnResident(1);
  q->OnResident(2);
  q->OnAccess(step++, iteration[0]);
  q->OnEvicted(2);
  EXPECT_EQ(q->PickVictimForPrefetch(Any(), 3), 1u);
}

// Note [data left by the learning iteration] in planner.h: data the
// learning (LRU) iteration left on the device leaves only on demand, in the
// first planned iteration as in any other, until its next use; from then on
// the plan evicts it ahead.
TEST(LifetimePolicyTest, DataLeftByTheLearningIterationLeavesOnlyOnDemand) {
  const std::vector<std::vector<BlockAccess>>& iteration = kCyclic;
  Step step = 0;
  auto p = AfterOneCyclicIteration(&step);
  // The learning iteration leaves 3 and 1 resident. MIN has 3 off from its
  // use at step 1 to the next iteration's (the gap crosses the boundary).
  p->OnResident(3);
  p->OnResident(1);
  p->OnIterationMark();
  EXPECT_TRUE(p->EvictAheadCandidates(Any(), 0).empty());
  // The first planned step: 2, used there and off until the next
  // iteration, goes ahead; 3 does not.
  p->OnResident(2);
  p->OnAccess(step++, iteration[0]);
  EXPECT_EQ(p->EvictAheadCandidates(Any(), 0), std::vector<BlockId>{2});
  p->OnEvicted(2);
  EXPECT_TRUE(p->EvictAheadCandidates(Any(), 0).empty());
  // On demand it is the victim (MIN has it off; 1 is kept).
  EXPECT_EQ(p->PickVictim(Any()), 3u);
  // Used in the planned iteration, it is the plan's: evicted ahead after its
  // use.
  p->OnAccess(step++, iteration[1]);
  EXPECT_EQ(p->EvictAheadCandidates(Any(), 0), std::vector<BlockId>{3});
}

}  // namespace
}  // namespace memvirt::policy

namespace memvirt::policy {
namespace {

// Note [iteration detection]: one-time set-up launches before the loop.
// Each fills a different block, so none of them ever recurs.
void FeedSetUp(Policy& p, Step& step, int count) {
  for (int i = 0; i < count; ++i) {
    const BlockId block = 100 + static_cast<BlockId>(i);
    p.OnAlloc(block, BlockInfo{1, BlockKind::kOther, true});
    const BlockAccess fill[] = {{block, W}};
    p.OnAccess(step++, fill);
  }
}

TEST(LifetimePolicyTest, DetectsIterationAfterSetUpPrefix) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Step step = 0;
  FeedSetUp(*p, step, 37);
  Feed(*p, step, 0, 5);
  step += 5;
  // Learned within the second iteration, as without a prefix.
  Feed(*p, step, 0, 4);
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  EXPECT_EQ(p->NextUseDistance(4), 1u);
  EXPECT_EQ(p->NextUseDistance(2), 3u);
  EXPECT_EQ(p->PickVictim(Any()), 3u);
}

// Note [recording layout]: a long run of one repeated step (a loop of period
// 1, never adopted) before the loop is set-up like any other; the run's last
// step proposes the period when the iteration's step with the same blocks
// comes, so the schedule is adopted one step earlier than without the run.
TEST(LifetimePolicyTest, DetectsIterationAfterLongRunOfOneRepeatedStep) {
  auto p = MakeLifetimePolicy();
  Allocate(*p);
  Step step = 0;
  for (int i = 0; i < 1000; ++i) p->OnAccess(step++, kIteration[4]);
  EXPECT_FALSE(p->NextUseDistance(4).has_value());
  Feed(*p, step, 0, 5);
  step += 5;
  Feed(*p, step, 0, 3);  // confirmed by steps 0..2 of the second iteration
  EXPECT_EQ(p->NextUseDistance(1), 1u);
  EXPECT_EQ(p->NextUseDistance(4), 2u);
  Feed(*p, step, 3, 4);
  for (BlockId b : {2, 3, 4}) p->OnResident(b);
  EXPECT_EQ(p->NextUseDistance(4), 1u);
  EXPECT_EQ(p->NextUseDistance(2), 3u);
  EXPECT_EQ(p->PickVictim(Any()), 3u);
}

// A run of one repeated step longer than max_iteration_steps: the recording
// starts over at the limit as for any other steps, so the iteration learned
// at the next mark holds the run's last steps only (here 2 of 10).
TEST(LifetimePolicyTest, LongRunOfOneRepeatedStepStartsTheRecordingOverAtItsLimit) {
  LifetimeOptions opt;
  opt.max_iteration_steps = 8;
  auto p = MakeLifetimePolicy(opt);
  Allocate(*p);
  p->OnIterationMark();
  Step step = 0;
  for (int i = 0; i < 10; ++i) p->OnAccess(step++, kIteration[4]);
  Feed(*p, step, 0, 4);
  p->OnIterationMark();
  // Learned: {4} {4} {1 W} {2} {3} {1 R}; at its end.
  EXPECT_EQ(p->NextUseDistance(4), 1u);
  EXPECT_EQ(p->NextUseDistance(1), 3u);
  EXPECT_EQ(p->NextUseDistance(2), 4u);
  EXPECT_EQ(p->NextUseDistance(3), 5u);
}

// An iteration A L L L B whose layer L (four steps) repeats with the same
// blocks: A writes 1, each layer reads 10 and 11 and writes 12, B reads 1
// and 2. Period 14; L's period 4 recurs inside it.
const std::vector<std::vector<BlockAccess>> kLayer = {
    {{10, R}}, {{11, R}}, {{10, R}, {12, W}}, {{12, R}, {11, R}}};

void FeedLayered(Policy& p, Step& step, bool with_b) {
  const BlockAccess a[] = {{1, W}};
  p.OnAccess(step++, a);
  for (int layer = 0; layer < 3; ++layer) {
    for (const auto& s : kLayer) p.OnAccess(step++, s);
  }
  if (with_b) {
    const BlockAccess b[] = {{1, R}, {2, R}};
    p.OnAccess(step++, b);
  }
}

void AllocateLayered(Policy& p) {
  p.OnAlloc(1, BlockInfo{10, BlockKind::kActivation, false});
  for (BlockId b : {2, 10, 11}) p.OnAlloc(b, BlockInfo{10, BlockKind::kWeight, true});
  p.OnAlloc(12, BlockInfo{10, BlockKind::kActivation, false});
}

TEST(LifetimePolicyTest, RepeatedLayersAfterSetUpAreNotTheIteration) {
  auto p = MakeLifetimePolicy();
  AllocateLayered(*p);
  Step step = 0;
  FeedSetUp(*p, step, 23);
  for (int i = 0; i < 2; ++i) FeedLayered(*p, step, /*with_b=*/true);
  // Third iteration, right after A: the next use of 1 is B, 13 steps on,
  // and 2 (read by B only) is known; a layer's period would know neither.
  const BlockAccess a[] = {{1, W}};
  p->OnAccess(step++, a);
  EXPECT_EQ(p->NextUseDistance(1), 13u);
  EXPECT_EQ(p->NextUseDistance(2), 13u);
  EXPECT_EQ(p->NextUseDistance(10), 1u);
  // Many iterations later (the schedule passed its trial) still the same.
  for (int layer = 0; layer < 3; ++layer) {
    for (const auto& s : kLayer) p->OnAccess(step++, s);
  }
  const BlockAccess b[] = {{1, R}, {2, R}};
  p->OnAccess(step++, b);
  for (int i = 0; i < 10; ++i) FeedLayered(*p, step, /*with_b=*/true);
  p->OnAccess(step++, a);
  EXPECT_EQ(p->NextUseDistance(1), 13u);
  EXPECT_EQ(p->NextUseDistance(2), 13u);
  for (BlockId b : {2, 10, 11}) p->OnResident(b);
  // Farthest next use: 2 (B), not a layer weight.
  EXPECT_EQ(p->PickVictim(Any()), 2u);
}

// The same with the iteration ending in its layers (A L L L): the next A,
// not a new step, rejects the layer's schedule.
TEST(LifetimePolicyTest, IterationEndingInRepeatedLayersIsFound) {
  auto p = MakeLifetimePolicy();
  AllocateLayered(*p);
  Step step = 0;
  FeedSetUp(*p, step, 5);
  for (int i = 0; i < 12; ++i) FeedLayered(*p, step, /*with_b=*/false);
  // Right after A: the next A is 13 steps on.
  const BlockAccess a[] = {{1, W}};
  p->OnAccess(step++, a);
  EXPECT_EQ(p->NextUseDistance(1), 13u);
  EXPECT_EQ(p->NextUseDistance(10), 1u);
}

// Without any set-up, the first iteration's repeated layers are rejected as
// well, and the iteration is learned from its second repetition on.
TEST(LifetimePolicyTest, RepeatedLayersWithoutSetUpAreNotTheIteration) {
  auto p = MakeLifetimePolicy();
  AllocateLayered(*p);
  Step step = 0;
  for (int i = 0; i < 3; ++i) FeedLayered(*p, step, /*with_b=*/true);
  const BlockAccess a[] = {{1, W}};
  p->OnAccess(step++, a);
  EXPECT_EQ(p->NextUseDistance(2), 13u);
}

}  // namespace
}  // namespace memvirt::policy

namespace memvirt::policy {
namespace {

// Note [iteration detection]: a first iteration that differs from the next
// ones (here its step 5 reads another block) has its period rejected; the
// same period is proposed again from the later, repeating iterations.
TEST(LifetimePolicyTest, FirstIterationDifferingFromTheNextOnesIsNotLearned) {
  auto p = MakeLifetimePolicy();
  for (BlockId b = 20; b <= 28; ++b) p->OnAlloc(b, BlockInfo{10, BlockKind::kWeight, true});
  Step step = 0;
  FeedSetUp(*p, step, 3);
  auto feed_iteration = [&](bool first) {
    for (BlockId i = 0; i < 8; ++i) {
      const BlockAccess a[] = {{first && i == 5 ? 28 : 20 + i, R}};
      p->OnAccess(step++, a);
    }
  };
  feed_iteration(/*first=*/true);
  for (int i = 0; i < 3; ++i) feed_iteration(/*first=*/false);
  // At step 0 of the fifth iteration (block 20 read): 25 is read 5 steps on,
  // and 28 (only in the first iteration) is not in the schedule.
  const BlockAccess a[] = {{20, R}};
  p->OnAccess(step++, a);
  EXPECT_EQ(p->NextUseDistance(25), 5u);
  EXPECT_EQ(p->NextUseDistance(20), 8u);
  EXPECT_FALSE(p->NextUseDistance(28).has_value());
}

}  // namespace
}  // namespace memvirt::policy

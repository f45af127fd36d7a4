#include "replay_plan.h"

#include <gtest/gtest.h>

#include "replay_abi.h"

namespace memvirt::replay {
namespace {

trace::Trace Small() {
  trace::Trace t;
  t.tensors = {{10, 1000, "weight", true},
               {11, 4000, "activation", false},
               {12, 3, "workspace", false},
               {13, 800, "activation", false}};
  t.kernels = {{0, "a", 10, {10}, {11, 12}},  // 12 is a one-kernel workspace
               {1, "b", 20, {11, 13}, {11}},  // 13 read before written; 11 read+write
               {2, "c", 30, {11}, {}}};
  t.frees = {{13, 1}};
  return t;
}

TEST(ReplayPlanTest, ScalesAndSchedulesLifetimes) {
  auto p = MakeReplayPlan(Small(), 0.5, 2.0, kSlots);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->bytes, (std::vector<uint64_t>{504, 2000, 8, 400}));
  EXPECT_EQ(p->persistent, (std::vector<uint32_t>{0}));
  EXPECT_DOUBLE_EQ(p->ideal_us, 120);
  ASSERT_EQ(p->kernels.size(), 3u);
  EXPECT_EQ(p->kernels[0].allocate, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(p->kernels[0].release, (std::vector<uint32_t>{2}));
  EXPECT_EQ(p->kernels[1].allocate, (std::vector<uint32_t>{3}));
  EXPECT_EQ(p->kernels[1].release, (std::vector<uint32_t>{3}));
  EXPECT_EQ(p->kernels[2].release, (std::vector<uint32_t>{1}));
  // Kernel b: reads 11 and 13, then writes 11.
  ASSERT_EQ(p->kernels[1].slots.size(), 3u);
  EXPECT_FALSE(p->kernels[1].slots[0].write);
  EXPECT_FALSE(p->kernels[1].slots[1].write);
  EXPECT_TRUE(p->kernels[1].slots[2].write);
  EXPECT_EQ(p->kernels[1].slots[2].tensor, 1u);
  EXPECT_TRUE(p->needs_init[0]);   // persistent
  EXPECT_FALSE(p->needs_init[1]);  // written first
  EXPECT_TRUE(p->needs_init[3]);   // read first
  // Kernel b: weight 504 + activation 2000 + the read-first 400 (the
  // workspace died after kernel a).
  EXPECT_EQ(p->peak_bytes, 504u + 2000 + 400);
}

TEST(ReplayPlanTest, LaunchedTraceHasTheReplaysOwnLaunches) {
  const trace::Trace t = Small();
  auto p = MakeReplayPlan(t, 1, 1, kSlots);
  ASSERT_TRUE(p.ok()) << p.status();
  uint64_t prologue = 0;
  const trace::Trace l = LaunchedTrace(t, *p, &prologue);
  // The counter (id 14, past every tensor and kernel id) comes first.
  ASSERT_EQ(l.tensors.size(), 5u);
  EXPECT_EQ(l.tensors[0].id, 14u);
  EXPECT_EQ(l.tensors[0].bytes, 8u);
  EXPECT_TRUE(l.tensors[0].persistent);
  // Prologue: the counter's memset, the weight's fill.
  EXPECT_EQ(prologue, 2u);
  ASSERT_EQ(l.kernels.size(), 6u);
  EXPECT_EQ(l.kernels[0].writes, (std::vector<uint64_t>{14}));
  EXPECT_TRUE(l.kernels[0].reads.empty());
  EXPECT_EQ(l.kernels[1].writes, (std::vector<uint64_t>{10}));
  EXPECT_EQ(l.kernels[1].us, 0);
  // Then a, the fill of 13 (read first) at its allocation before b, b, c;
  // every launch reads the counter; kernel ids are kept for the frees.
  EXPECT_EQ(l.kernels[2].id, 0u);
  EXPECT_EQ(l.kernels[2].reads, (std::vector<uint64_t>{10, 14}));
  EXPECT_EQ(l.kernels[3].writes, (std::vector<uint64_t>{13}));
  EXPECT_EQ(l.kernels[3].reads, (std::vector<uint64_t>{14}));
  EXPECT_EQ(l.kernels[4].id, 1u);
  EXPECT_EQ(l.kernels[5].id, 2u);
  EXPECT_EQ(l.frees.size(), 1u);
}

TEST(ReplayPlanTest, RejectsTooManySlotsAndBadScale) {
  EXPECT_FALSE(MakeReplayPlan(Small(), 1, 1, 2).ok());
  EXPECT_FALSE(MakeReplayPlan(Small(), 0, 1, kSlots).ok());
}

TEST(ReplayAbiTest, PatternDependsOnTensorVersionAndWord) {
  EXPECT_NE(ReplayPattern(ReplayTag(1, 0), 0), ReplayPattern(ReplayTag(1, 1), 0));
  EXPECT_NE(ReplayPattern(ReplayTag(1, 0), 0), ReplayPattern(ReplayTag(2, 0), 0));
  EXPECT_NE(ReplayPattern(ReplayTag(1, 0), 0), ReplayPattern(ReplayTag(1, 0), 1));
  EXPECT_EQ(ReplayPattern(ReplayTag(7, 3), 9), ReplayPattern(ReplayTag(7, 3), 9));
}

}  // namespace
}  // namespace memvirt::replay

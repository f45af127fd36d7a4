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

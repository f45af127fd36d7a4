#include "residency_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace memvirt::policy::internal {
namespace {

constexpr AccessMode R = AccessMode::kRead;

// Cyclic steps 0:{1,2} 1:{3} 2:{1}; every block 10 bytes, room for two.
// At step 1, MIN evicts 2 (next use at the next iteration's step 0) rather
// than 1 (step 2). At step 0, 1 is in the step and 3 (next at step 1) goes.
// At step 1 again 2 goes rather than 1. So 1 always stays; 2 and 3 are off
// in their (only) gap.
Schedule ThreeBlocks() { return Schedule({{0, {{1, R}, {2, R}}}, {1, {{3, R}}}, {2, {{1, R}}}}); }

uint32_t Dense(const Schedule& s, BlockId b) { return *s.DenseIndex(b); }

TEST(ResidencyPlanTest, KeepsWhatMinKeepsAndMarksTheRestOff) {
  Schedule s = ThreeBlocks();
  const std::vector<uint64_t> bytes(s.num_blocks(), 10);
  ResidencyPlan plan(s, bytes, 20);
  ASSERT_FALSE(plan.empty());
  EXPECT_FALSE(plan.OffBefore(Dense(s, 1), 0));
  EXPECT_FALSE(plan.OffBefore(Dense(s, 1), 1));
  EXPECT_TRUE(plan.OffBefore(Dense(s, 2), 0));
  EXPECT_TRUE(plan.OffBefore(Dense(s, 3), 0));
}

TEST(ResidencyPlanTest, EverythingStaysWhenItFits) {
  Schedule s = ThreeBlocks();
  const std::vector<uint64_t> bytes(s.num_blocks(), 10);
  ResidencyPlan plan(s, bytes, 30);
  for (BlockId b : {1, 2, 3}) EXPECT_FALSE(plan.OffBefore(Dense(s, b), 0)) << b;
  EXPECT_TRUE(ResidencyPlan(s, bytes, 0).empty());
}

}  // namespace
}  // namespace memvirt::policy::internal

#include "schedule.h"

#include <gtest/gtest.h>

namespace memvirt::policy::internal {
namespace {

constexpr AccessMode R = AccessMode::kRead;
constexpr AccessMode W = AccessMode::kWrite;

// Steps: 0:{1w} 1:{2w,1r} 2:{1r} 3:{2r}
Schedule Sample() {
  return Schedule({{0, {{1, W}}}, {1, {{2, W}, {1, R}}}, {2, {{1, R}}}, {3, {{2, R}}}});
}

TEST(ScheduleTest, NextUseLinear) {
  Schedule s = Sample();
  auto n = s.NextUseAfter(1, -1, false);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->position, 0u);
  EXPECT_EQ(n->mode, W);
  EXPECT_EQ(s.NextUseAfter(1, 0, false)->position, 1u);
  EXPECT_EQ(s.NextUseAfter(1, 1, false)->position, 2u);
  EXPECT_FALSE(s.NextUseAfter(1, 2, false).has_value());
  EXPECT_FALSE(s.NextUseAfter(99, -1, false).has_value());
}

TEST(ScheduleTest, NextUseCyclicWrapsToNextIteration) {
  Schedule s = Sample();
  // Block 1 after position 2 is next used at step 0 of the next iteration.
  auto n = s.NextUseAfter(1, 2, true);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->position, 4u);
  EXPECT_EQ(n->mode, W);
  // Third iteration, position 1 (absolute 9): block 2 next at absolute 11.
  EXPECT_EQ(s.NextUseAfter(2, 9, true)->position, 11u);
}

TEST(ScheduleTest, DeadAfterFlags) {
  Schedule s = Sample();
  // Block 1's last read (step 2) is followed by a write in the next
  // iteration: dead after it, cyclic or not.
  ASSERT_EQ(s.uses_at(2, true).size(), 1u);
  EXPECT_TRUE(s.uses_at(2, true)[0].dead_after);
  EXPECT_TRUE(s.uses_at(2, false)[0].dead_after);
  // Step 1 reads block 1, which is read again at step 2: live.
  for (const StepUse& u : s.uses_at(1, true)) {
    if (u.block == 1) {
      EXPECT_FALSE(u.dead_after);
    }
  }
}

TEST(ScheduleTest, MergesDuplicatesAndSignaturesIgnoreOrder) {
  Schedule s({{0, {{5, R}, {5, W}, {6, R}}},
              {1, {{6, R}, {5, AccessMode::kReadWrite}}},
              {2, {{6, R}, {5, R}}}});
  ASSERT_EQ(s.step(0).accesses.size(), 2u);
  EXPECT_EQ(s.step(0).accesses[0].mode, AccessMode::kReadWrite);
  EXPECT_EQ(s.signature(0), s.signature(1));
  EXPECT_NE(s.signature(1), s.signature(2));  // modes count
  const BlockAccess other[] = {{5, R}, {7, R}};
  EXPECT_NE(AccessSignature(other), s.signature(1));
}

}  // namespace
}  // namespace memvirt::policy::internal

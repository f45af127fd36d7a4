#include "memvirt/nvme/demotion_planner.h"

#include <gtest/gtest.h>

namespace memvirt::nvme {
namespace {

constexpr uint64_t kMiB = 1 << 20;

TEST(DemotionPlannerTest, NothingWhenWithinBudget) {
  const std::vector<SlabUse> slabs = {{1, 2 * kMiB, 10}, {2, 2 * kMiB, 20}};
  const DemotionPlan p = PlanDemotions(slabs, 4 * kMiB, 100 * kMiB);
  EXPECT_TRUE(p.demote.empty());
  EXPECT_EQ(p.shortfall, 0u);
}

TEST(DemotionPlannerTest, FarthestNextUseGoesFirst) {
  const std::vector<SlabUse> slabs = {
      {1, 2 * kMiB, 5}, {2, 2 * kMiB, kNeverUsed}, {3, 2 * kMiB, 50}, {4, 2 * kMiB, 7}};
  const DemotionPlan p = PlanDemotions(slabs, 4 * kMiB, 100 * kMiB);
  EXPECT_EQ(p.demote, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(p.bytes, 4 * kMiB);
  EXPECT_EQ(p.shortfall, 0u);
}

TEST(DemotionPlannerTest, PinnedSlabsStayAndShortfallIsReported) {
  const std::vector<SlabUse> slabs = {{1, 2 * kMiB, 100, true}, {2, 2 * kMiB, 1}};
  const DemotionPlan p = PlanDemotions(slabs, 0, 100 * kMiB);
  EXPECT_EQ(p.demote, (std::vector<uint64_t>{2}));
  EXPECT_EQ(p.shortfall, 2 * kMiB);
}

TEST(DemotionPlannerTest, RespectsNvmeFreeSpace) {
  const std::vector<SlabUse> slabs = {{1, 8 * kMiB, 100}, {2, 2 * kMiB, 50}, {3, 2 * kMiB, 1}};
  const DemotionPlan p = PlanDemotions(slabs, 2 * kMiB, 4 * kMiB);
  // Slab 1 does not fit on NVMe; 2 and 3 do.
  EXPECT_EQ(p.demote, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(p.bytes, 4 * kMiB);
  EXPECT_EQ(p.shortfall, 6 * kMiB);
}

TEST(DemotionPlannerTest, TiesBreakByLargerSlabThenKey) {
  const std::vector<SlabUse> slabs = {{9, 2 * kMiB, 5}, {3, 2 * kMiB, 5}, {4, 4 * kMiB, 5}};
  const DemotionPlan p = PlanDemotions(slabs, 0, 100 * kMiB);
  EXPECT_EQ(p.demote, (std::vector<uint64_t>{4, 3, 9}));
}

TEST(DemotionPlannerTest, PromotesSoonestWithinHorizonAndHostSpace) {
  const std::vector<SlabUse> slabs = {{1, 2 * kMiB, 130},
                                      {2, 2 * kMiB, 105},
                                      {3, 2 * kMiB, 101},
                                      {4, 2 * kMiB, kNeverUsed},
                                      {5, 2 * kMiB, 102, true}};
  PromotionPlan p = PlanPromotions(slabs, 100, 10, 100 * kMiB);
  EXPECT_EQ(p.promote, (std::vector<uint64_t>{3, 2}));
  p = PlanPromotions(slabs, 100, 50, 2 * kMiB);
  EXPECT_EQ(p.promote, (std::vector<uint64_t>{3}));
  EXPECT_EQ(p.bytes, 2 * kMiB);
  p = PlanPromotions(slabs, 100, kNeverUsed, 100 * kMiB);
  EXPECT_EQ(p.promote, (std::vector<uint64_t>{3, 2, 1}));
}

}  // namespace
}  // namespace memvirt::nvme

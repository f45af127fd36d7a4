#include <gtest/gtest.h>

#include "memvirt/policy/policy.h"

namespace memvirt::policy {
namespace {

std::unique_ptr<Policy> LruWithResident(std::initializer_list<BlockId> ids) {
  auto p = MakeLruPolicy();
  for (BlockId id : ids) {
    p->OnAlloc(id, BlockInfo{1, BlockKind::kActivation, false});
    p->OnResident(id);
  }
  return p;
}

auto Any() {
  return [](BlockId) { return true; };
}

TEST(LruPolicyTest, EvictsLeastRecentlyAccessed) {
  auto p = LruWithResident({1, 2, 3});
  const BlockAccess a[] = {{1, AccessMode::kRead}};
  p->OnAccess(0, a);
  EXPECT_EQ(p->PickVictim(Any()), 2u);
  const BlockAccess b[] = {{2, AccessMode::kWrite}};
  p->OnAccess(1, b);
  EXPECT_EQ(p->PickVictim(Any()), 3u);
}

TEST(LruPolicyTest, RespectsEligibility) {
  auto p = LruWithResident({1, 2, 3});
  EXPECT_EQ(p->PickVictim([](BlockId b) { return b != 1; }), 2u);
  EXPECT_EQ(p->PickVictim([](BlockId) { return false; }), std::nullopt);
}

TEST(LruPolicyTest, ForgetsEvictedAndFreedBlocks) {
  auto p = LruWithResident({1, 2, 3});
  p->OnEvicted(1);
  p->OnFree(2);
  EXPECT_EQ(p->PickVictim(Any()), 3u);
  p->OnEvicted(3);
  EXPECT_EQ(p->PickVictim(Any()), std::nullopt);
  // Becoming resident again counts as the most recent use.
  p->OnResident(1);
  EXPECT_EQ(p->PickVictim(Any()), 1u);
}

TEST(LruPolicyTest, DemandPagingOnly) {
  auto p = LruWithResident({1});
  p->OnAlloc(2, BlockInfo{1, BlockKind::kWeight, true});
  EXPECT_TRUE(p->PrefetchCandidates(1 << 30).empty());
  EXPECT_FALSE(p->IsDead(1));
  EXPECT_TRUE(p->EvictAheadCandidates(Any(), 0).empty());
  EXPECT_EQ(p->name(), "lru");
}

}  // namespace
}  // namespace memvirt::policy

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <set>
#include <vector>

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

// Note [dense block ids]: small ids index a vector, others a hash map; one
// recency order links both kinds.
TEST(LruPolicyTest, SmallAndLargeIdsShareOneOrder) {
  const BlockId large = BlockId{1} << 40;
  auto p = LruWithResident({5, large, 7, large + 1});
  const BlockAccess a[] = {{5, AccessMode::kRead}, {large + 1, AccessMode::kRead}};
  p->OnAccess(0, a);
  EXPECT_EQ(p->PickVictim(Any()), large);
  p->OnFree(large);
  EXPECT_EQ(p->PickVictim(Any()), 7u);
  p->OnEvicted(7);
  EXPECT_EQ(p->PickVictim(Any()), 5u);
  EXPECT_EQ(p->PickVictim([](BlockId b) { return b != 5; }), large + 1);
}

// The full eviction order of `p`: victims picked one after another, each
// excluded from the next pick.
std::vector<BlockId> Order(Policy& p) {
  std::vector<BlockId> order;
  while (auto v = p.PickVictim(
             [&](BlockId b) { return std::find(order.begin(), order.end(), b) == order.end(); })) {
    order.push_back(*v);
  }
  return order;
}

// Random events over small and large ids, against a list kept by the
// definition (Note [LRU recency]).
TEST(LruPolicyTest, MatchesTheDefinitionUnderRandomEvents) {
  std::mt19937_64 rng(7);
  std::vector<BlockId> ids;
  for (BlockId i = 0; i < 12; ++i) ids.push_back(i * 3);
  for (BlockId i = 0; i < 12; ++i) ids.push_back((BlockId{1} << 33) + i);
  auto p = MakeLruPolicy();
  std::set<BlockId> known;
  std::list<BlockId> expected;  // resident, least recent first
  auto drop = [&](BlockId b) { expected.remove(b); };
  for (int i = 0; i < 4000; ++i) {
    const BlockId b = ids[rng() % ids.size()];
    switch (rng() % 5) {
      case 0:
        p->OnAlloc(b, BlockInfo{1, BlockKind::kActivation, false});
        known.insert(b);
        break;
      case 1:
        p->OnFree(b);
        known.erase(b);
        drop(b);
        break;
      case 2:
        p->OnResident(b);
        known.insert(b);
        if (std::find(expected.begin(), expected.end(), b) == expected.end()) {
          expected.push_back(b);
        }
        break;
      case 3:
        p->OnEvicted(b);
        drop(b);
        break;
      default: {
        const BlockId c = ids[rng() % ids.size()];
        const BlockAccess a[] = {{b, AccessMode::kRead}, {c, AccessMode::kWrite}};
        p->OnAccess(i, a);
        for (BlockId x : {b, c}) {
          if (std::find(expected.begin(), expected.end(), x) != expected.end()) {
            drop(x);
            expected.push_back(x);
          }
        }
      }
    }
    ASSERT_EQ(Order(*p), std::vector<BlockId>(expected.begin(), expected.end())) << "event " << i;
  }
}

}  // namespace
}  // namespace memvirt::policy

#include "shim/core/lru_policy.h"

#include <gtest/gtest.h>

#include <set>

namespace memvirt::shim {
namespace {

bool AnyChunk(void*, uint32_t) { return true; }
bool NotInSet(void* set, uint32_t c) { return !static_cast<std::set<uint32_t>*>(set)->count(c); }

TEST(LruPolicyTest, EvictsLeastRecentlyAccessed) {
  LruPolicy p(16, 0);
  for (uint32_t c = 0; c < 4; ++c) {
    p.OnAlloc(c);
    p.OnResident(c);
  }
  const uint32_t touch[] = {0, 2};
  p.OnAccess(1, touch, 2);
  uint32_t v;
  ASSERT_TRUE(p.PickVictim(&AnyChunk, nullptr, &v));
  EXPECT_EQ(v, 1u);
  std::set<uint32_t> busy = {1, 3};
  ASSERT_TRUE(p.PickVictim(&NotInSet, &busy, &v));
  EXPECT_EQ(v, 0u);
  p.OnEvicted(1);
  EXPECT_EQ(p.TEST_Order(), (std::vector<uint32_t>{2, 0, 3}));
}

TEST(LruPolicyTest, NoVictimWhenNothingEligible) {
  LruPolicy p(4, 0);
  p.OnAlloc(0);
  p.OnResident(0);
  std::set<uint32_t> busy = {0};
  uint32_t v;
  EXPECT_FALSE(p.PickVictim(&NotInSet, &busy, &v));
}

TEST(LruPolicyTest, PrefetchesTheChunksThatFollowedAMiss) {
  LruPolicy p(16, 2);
  for (uint32_t c = 0; c < 6; ++c) p.OnAlloc(c);
  // First pass: 0 1 2 3 touched in order, all resident.
  for (uint32_t c = 0; c < 4; ++c) {
    p.OnResident(c);
    p.OnAccess(c + 1, &c, 1);
  }
  p.OnEvicted(1);
  p.OnEvicted(2);
  p.OnEvicted(3);
  const uint32_t zero = 0;
  p.OnAccess(10, &zero, 1);  // hit: no prefetch
  EXPECT_TRUE(p.PrefetchCandidates(64 << 20).empty());
  const uint32_t one = 1;
  p.OnAccess(11, &one, 1);  // miss on 1: 2 and 3 followed it last time
  EXPECT_EQ(p.PrefetchCandidates(64 << 20), (std::vector<uint32_t>{2, 3}));
}

}  // namespace
}  // namespace memvirt::shim

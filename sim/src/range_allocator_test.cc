#include "range_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace memsim {
namespace {

constexpr uint64_t kBase = 1ull << 32;

TEST(SimRangeAllocator, AllocatesAlignedNonOverlappingRanges) {
  RangeAllocator a(kBase, 1 << 20);
  auto x = a.Allocate(100, 64);
  auto y = a.Allocate(4096, 4096);
  ASSERT_TRUE(x && y);
  EXPECT_EQ(*x % 64, 0u);
  EXPECT_EQ(*y % 4096, 0u);
  EXPECT_TRUE(*x + 100 <= *y || *y + 4096 <= *x);
  EXPECT_EQ(a.free_bytes(), (1u << 20) - 100 - 4096);
}

TEST(SimRangeAllocator, HonoursFreeHintAndIgnoresTakenHint) {
  RangeAllocator a(kBase, 1 << 20);
  auto x = a.Allocate(4096, 4096, kBase + 65536);
  ASSERT_TRUE(x);
  EXPECT_EQ(*x, kBase + 65536);
  auto y = a.Allocate(4096, 4096, kBase + 65536);
  ASSERT_TRUE(y);
  EXPECT_NE(*y, *x);
}

TEST(SimRangeAllocator, ExhaustsAndRecoversAfterFreeWithCoalescing) {
  RangeAllocator a(kBase, 4 * 4096);
  std::vector<uint64_t> got;
  for (int i = 0; i < 4; ++i) {
    auto r = a.Allocate(4096, 4096);
    ASSERT_TRUE(r);
    got.push_back(*r);
  }
  EXPECT_FALSE(a.Allocate(4096, 4096));
  // Free in an order that needs merging on both sides, then the whole span fits again.
  a.Free(got[1], 4096);
  a.Free(got[3], 4096);
  a.Free(got[2], 4096);
  a.Free(got[0], 4096);
  EXPECT_EQ(a.free_bytes(), 4u * 4096);
  auto whole = a.Allocate(4 * 4096, 4096);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, kBase);
}

TEST(SimRangeAllocator, RandomWorkloadNeverOverlaps) {
  RangeAllocator a(kBase, 64 << 20);
  std::mt19937_64 rng(7);
  std::vector<std::pair<uint64_t, uint64_t>> live;
  for (int step = 0; step < 2000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const uint64_t size = (rng() % 64 + 1) * 4096;
      auto r = a.Allocate(size, 4096);
      if (!r) continue;
      for (auto& [s, n] : live) ASSERT_TRUE(*r + size <= s || s + n <= *r);
      live.emplace_back(*r, size);
    } else {
      const size_t i = rng() % live.size();
      a.Free(live[i].first, live[i].second);
      live.erase(live.begin() + static_cast<long>(i));
    }
  }
  uint64_t used = 0;
  for (auto& [s, n] : live) used += n;
  EXPECT_EQ(a.free_bytes(), (64u << 20) - used);
}

}  // namespace
}  // namespace memsim

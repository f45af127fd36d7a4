#include "shim/core/block_allocator.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace memvirt::shim {
namespace {

class BlockAllocatorTest : public ::testing::Test {
 protected:
  BlockAllocatorTest() : table_(0x10000000000ull, 64), alloc_(&table_, 48) {}
  ChunkTable table_;
  BlockAllocator alloc_;
};

TEST_F(BlockAllocatorTest, SizeClassesAreMonotonicAndCoverSmallRange) {
  uint64_t prev = 0;
  for (int c = 0; c < BlockAllocator::NumClasses(); ++c) {
    EXPECT_GT(BlockAllocator::ClassBytes(c), prev);
    EXPECT_EQ(BlockAllocator::ClassBytes(c) % BlockAllocator::kMinAlign, 0u);
    prev = BlockAllocator::ClassBytes(c);
  }
  EXPECT_EQ(prev, BlockAllocator::kSmallMax);
  for (uint64_t n : {1ull, 255ull, 256ull, 257ull, 1000ull, 70000ull, 1ull << 20}) {
    const int c = BlockAllocator::ClassOf(n);
    ASSERT_GE(c, 0);
    EXPECT_GE(BlockAllocator::ClassBytes(c), n);
    if (c > 0) {
      EXPECT_LT(BlockAllocator::ClassBytes(c - 1), n);
    }
  }
  EXPECT_EQ(BlockAllocator::ClassOf((1ull << 20) + 1), -1);
}

TEST_F(BlockAllocatorTest, SmallBlocksDoNotOverlapAndShareSlabs) {
  std::set<uint64_t> offsets;
  for (int i = 0; i < 1000; ++i) {
    BlockAllocator::Allocation a;
    ASSERT_TRUE(alloc_.Allocate(300, &a));
    EXPECT_EQ(a.offset % 256, 0u);
    EXPECT_TRUE(offsets.insert(a.offset).second);
  }
  // 1000 x 512 B fit in one 2 MiB slab.
  EXPECT_EQ(alloc_.committed_chunks(), 1u);
  uint64_t prev = 0;
  for (uint64_t off : offsets) {
    if (prev != 0) {
      EXPECT_GE(off - prev, 512u);
    }
    prev = off;
  }
}

TEST_F(BlockAllocatorTest, FreeThenAllocateReusesSmallBlock) {
  BlockAllocator::Allocation a, b;
  ASSERT_TRUE(alloc_.Allocate(4096, &a));
  BlockAllocator::Release rel;
  ASSERT_TRUE(alloc_.Free(a.offset, &rel));
  EXPECT_EQ(rel.bytes, 4096u);
  ASSERT_TRUE(alloc_.Allocate(4000, &b));
  EXPECT_EQ(a.offset, b.offset);
}

TEST_F(BlockAllocatorTest, RejectsDoubleAndInteriorFree) {
  BlockAllocator::Allocation a, big;
  ASSERT_TRUE(alloc_.Allocate(1024, &a));
  ASSERT_TRUE(alloc_.Allocate(5 << 20, &big));
  BlockAllocator::Release rel;
  EXPECT_FALSE(alloc_.Free(a.offset + 256, &rel));
  EXPECT_FALSE(alloc_.Free(big.offset + kChunkBytes, &rel));
  EXPECT_TRUE(alloc_.Free(a.offset, &rel));
  EXPECT_FALSE(alloc_.Free(a.offset, &rel));
  EXPECT_TRUE(alloc_.Free(big.offset, &rel));
  EXPECT_EQ(rel.freed_count, 3u);
  EXPECT_FALSE(alloc_.Free(big.offset, &rel));
}

TEST_F(BlockAllocatorTest, LargeBlocksAreChunkAlignedAndOwnTheirChunks) {
  BlockAllocator::Allocation a;
  ASSERT_TRUE(alloc_.Allocate((3 << 20) + 7, &a));
  EXPECT_EQ(a.offset % kChunkBytes, 0u);
  EXPECT_EQ(a.new_count, 2u);
  const uint32_t first = static_cast<uint32_t>(a.offset >> kChunkShift);
  for (uint32_t c = first; c < first + 2; ++c) {
    EXPECT_EQ(table_[c].kind, ChunkKind::kLarge);
    EXPECT_EQ(table_[c].owner_first, first);
    EXPECT_EQ(table_[c].owner_count, 2u);
  }
  uint64_t base, bytes;
  ASSERT_TRUE(alloc_.Lookup(a.offset + (3 << 20), &base, &bytes));
  EXPECT_EQ(base, a.offset);
  EXPECT_EQ(bytes, (3u << 20) + 7);
  EXPECT_FALSE(alloc_.Lookup(a.offset + (3 << 20) + 7, &base, &bytes));  // past the end
}

TEST_F(BlockAllocatorTest, CapacityLimitsCommittedChunksAndFreeRestoresIt) {
  std::vector<uint64_t> blocks;
  BlockAllocator::Allocation a;
  while (alloc_.Allocate(4 << 20, &a)) blocks.push_back(a.offset);
  EXPECT_EQ(blocks.size(), 24u);  // 48 chunks of capacity
  EXPECT_EQ(alloc_.committed_chunks(), 48u);
  BlockAllocator::Release rel;
  ASSERT_TRUE(alloc_.Free(blocks[3], &rel));
  ASSERT_TRUE(alloc_.Free(blocks[4], &rel));
  // Coalesced: an 8 MiB block fits where two 4 MiB blocks were.
  ASSERT_TRUE(alloc_.Allocate(8 << 20, &a));
  EXPECT_EQ(a.offset, blocks[3]);
}

TEST_F(BlockAllocatorTest, FreedLargeRangeIsReusedForTheSameSize) {
  BlockAllocator::Allocation a, b, c;
  ASSERT_TRUE(alloc_.Allocate(4 << 20, &a));
  ASSERT_TRUE(alloc_.Allocate(4 << 20, &b));
  BlockAllocator::Release rel;
  ASSERT_TRUE(alloc_.Free(a.offset, &rel));
  EXPECT_EQ(alloc_.committed_chunks(), 2u);
  ASSERT_TRUE(alloc_.Allocate(3 << 20, &c));  // same chunk count: the cached range
  EXPECT_EQ(c.offset, a.offset);
  EXPECT_EQ(c.new_first, a.new_first);
  EXPECT_EQ(c.new_count, 2u);
  EXPECT_EQ(alloc_.committed_chunks(), 4u);
  uint64_t base = 0, bytes = 0;
  ASSERT_TRUE(alloc_.Lookup(c.offset + (3 << 20) - 1, &base, &bytes));
  EXPECT_EQ(bytes, 3u << 20);
  EXPECT_FALSE(alloc_.Lookup(c.offset + (3 << 20), &base, &bytes));
  ASSERT_FALSE(alloc_.Free(a.offset + kChunkBytes, &rel));  // interior chunk
}

// Note [repeatable placement]: a training iteration allocates the same
// sizes in the same order every time but frees them in another order (here:
// every other block first, then the rest backwards). The free objects and
// cached ranges are taken lowest address first, so every iteration places
// each block where the previous one did; a last-freed-first list would hand
// the addresses out permuted.
TEST_F(BlockAllocatorTest, AnIterationFreedInAnotherOrderIsPlacedAsThePreviousOne) {
  // Six ranges of two chunks: more than the range cache keeps of one count.
  const std::vector<uint64_t> sizes = {4096,    4096, 6000, 4096,    4 << 20, 4 << 20, 300,
                                       4 << 20, 4096, 6000, 4 << 20, 300,     4 << 20, 4 << 20};
  BlockAllocator::Allocation persistent;
  ASSERT_TRUE(alloc_.Allocate(4 << 20, &persistent));
  std::vector<std::vector<uint64_t>> placements;
  for (int iteration = 0; iteration < 3; ++iteration) {
    std::vector<uint64_t> offsets;
    for (uint64_t bytes : sizes) {
      BlockAllocator::Allocation a;
      ASSERT_TRUE(alloc_.Allocate(bytes, &a));
      offsets.push_back(a.offset);
    }
    const size_t n = offsets.size();  // even
    std::vector<size_t> order;
    for (size_t i = 0; i < n; i += 2) order.push_back(i);      // 0, 2, ..., n - 2
    for (size_t i = 1; i < n; i += 2) order.push_back(n - i);  // n - 1, n - 3, ..., 1
    for (size_t i : order) {
      BlockAllocator::Release rel;
      ASSERT_TRUE(alloc_.Free(offsets[i], &rel));
    }
    placements.push_back(offsets);
  }
  EXPECT_EQ(placements[1], placements[0]);
  EXPECT_EQ(placements[2], placements[1]);
}

TEST_F(BlockAllocatorTest, RandomizedAllocFreeKeepsBlocksDisjoint) {
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> live;  // offset -> size
  for (int i = 0; i < 20000; ++i) {
    if (live.empty() || rng() % 2 == 0) {
      uint64_t size = 1 + rng() % (rng() % 4 == 0 ? (6ull << 20) : 8192);
      BlockAllocator::Allocation a;
      if (!alloc_.Allocate(size, &a)) continue;
      auto next = live.lower_bound(a.offset);
      if (next != live.end()) {
        ASSERT_LE(a.offset + size, next->first);
      }
      if (next != live.begin()) {
        auto prev = std::prev(next);
        ASSERT_LE(prev->first + prev->second, a.offset);
      }
      live[a.offset] = size;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      BlockAllocator::Release rel;
      ASSERT_TRUE(alloc_.Free(it->first, &rel));
      live.erase(it);
    }
  }
}

TEST(BlockAllocatorSparseTest, OnlyTheAddressRangeHandedOutIsMaterialized) {
  ChunkTable table(0x10000000000ull, 2u << 20);  // 4 TiB of address space
  BlockAllocator alloc(&table, 1u << 20);
  EXPECT_EQ(table.size(), 0u);
  BlockAllocator::Allocation small, large;
  ASSERT_TRUE(alloc.Allocate(4096, &small));
  ASSERT_TRUE(alloc.Allocate(8 * kChunkBytes, &large));
  EXPECT_EQ(table.size(), ChunkTable::kMaterializeStep);
  EXPECT_EQ(table[static_cast<uint32_t>(large.offset >> kChunkShift)].kind, ChunkKind::kLarge);

  // A reservation as large as a GPU's memory (80 GiB) materializes its own range.
  uint32_t first = 0;
  ASSERT_TRUE(alloc.Reserve(40960, 1ull << 30, &first));
  EXPECT_GE(table.size(), first + 40960);
  EXPECT_LT(table.size(), first + 40960 + ChunkTable::kMaterializeStep);
  EXPECT_EQ(table[first + 40959].kind, ChunkKind::kReserved);

  // Freeing and looking up past the materialized range is refused, not read.
  BlockAllocator::Release rel;
  EXPECT_FALSE(alloc.Free(uint64_t{table.size() + 10} << kChunkShift, &rel));
  uint64_t block = 0, bytes = 0;
  EXPECT_FALSE(alloc.Lookup(uint64_t{table.size() + 10} << kChunkShift, &block, &bytes));
}

}  // namespace
}  // namespace memvirt::shim

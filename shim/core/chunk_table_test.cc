#include "shim/core/chunk_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

namespace memvirt::shim {
namespace {

constexpr CUdeviceptr kBase = 0x10000000000ull;
constexpr uint32_t kFourTiBOfChunks = 2u << 20;

uint64_t ResidentBytes() {
  FILE* f = fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = fscanf(f, "%llu %llu", &size, &resident);
  fclose(f);
  return n == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

TEST(ChunkTableTest, StartsEmptyAndMaterializesInSteps) {
  ChunkTable table(kBase, kFourTiBOfChunks);
  ASSERT_EQ(table.capacity(), kFourTiBOfChunks);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_FALSE(table.Contains(kBase));

  table.Materialize(3);
  ASSERT_EQ(table.size(), ChunkTable::kMaterializeStep);
  EXPECT_EQ(table.bytes(), uint64_t{ChunkTable::kMaterializeStep} << kChunkShift);
  EXPECT_TRUE(table.Contains(kBase));
  EXPECT_TRUE(table.Contains(table.AddressOf(ChunkTable::kMaterializeStep) - 1));
  EXPECT_FALSE(table.Contains(table.AddressOf(ChunkTable::kMaterializeStep)));
  EXPECT_FALSE(table.Contains(kBase - 1));
  for (uint32_t c : {0u, 2u, ChunkTable::kMaterializeStep - 1}) {
    EXPECT_EQ(table[c].kind, ChunkKind::kFree);
    EXPECT_EQ(table[c].owner_first, kNoIndex);
    EXPECT_EQ(table[c].phys, kNoIndex);
    EXPECT_EQ(table[c].uses[0].stream, kNoIndex);
  }
  table.Materialize(2);  // already there: nothing changes
  EXPECT_EQ(table.size(), ChunkTable::kMaterializeStep);
}

TEST(ChunkTableTest, GrowthKeepsEntriesAndTheirAddresses) {
  ChunkTable table(kBase, kFourTiBOfChunks);
  table.Materialize(1);
  ChunkEntry& entry = table[7];
  entry.phys = 42;
  entry.kind = ChunkKind::kLarge;
  table.Materialize(100000);
  EXPECT_GE(table.size(), 100000u);
  EXPECT_EQ(&table[7], &entry);
  EXPECT_EQ(table[7].phys, 42u);
  EXPECT_EQ(table[7].kind, ChunkKind::kLarge);
  EXPECT_EQ(table[99999].kind, ChunkKind::kFree);
}

TEST(ChunkTableTest, TheLastStepStopsAtTheCapacity) {
  ChunkTable table(kBase, ChunkTable::kMaterializeStep + 88);
  table.Materialize(ChunkTable::kMaterializeStep + 1);
  EXPECT_EQ(table.size(), ChunkTable::kMaterializeStep + 88);
  EXPECT_EQ(table.bytes(), table.capacity() * kChunkBytes);
}

TEST(ChunkTableTest, HostMemoryFollowsTheRangeInUseNotTheCapacity) {
  const uint64_t before = ResidentBytes();
  ASSERT_NE(before, 0u);
  ChunkTable table(kBase, kFourTiBOfChunks);  // the whole table: about 240 MiB of entries
  table.Materialize(ChunkTable::kMaterializeStep);
  const uint64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, 16ull << 20) << "resident bytes grew by " << grown;
  EXPECT_GT(uint64_t{kFourTiBOfChunks} * sizeof(ChunkEntry), 128ull << 20);
}

TEST(ChunkTableTest, MovedFromTableIsEmpty) {
  ChunkTable a(kBase, 1024);
  a.Materialize(10);
  a[5].phys = 9;
  ChunkTable b(std::move(a));
  EXPECT_EQ(a.capacity(), 0u);  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(a.size(), 0u);
  EXPECT_FALSE(a.Contains(kBase));
  EXPECT_EQ(b[5].phys, 9u);
  ChunkTable c;
  c = std::move(b);
  EXPECT_EQ(c[5].phys, 9u);
  EXPECT_EQ(c.capacity(), 1024u);
}

TEST(ChunkTableTest, UnmappedMarksAreCountedAndMoveWithTheTable) {
  ChunkTable a(kBase, 1024);
  a.Materialize(10);
  a.SetUnmapped(2, true);
  a.SetUnmapped(7, true);
  a.SetUnmapped(7, true);   // already marked: counted once
  a.SetUnmapped(3, false);  // not marked: nothing to clear
  EXPECT_EQ(a.unmapped_count(), 2u);
  EXPECT_TRUE(a[7].unmapped);
  a.SetUnmapped(2, false);
  EXPECT_FALSE(a[2].unmapped);
  EXPECT_EQ(a.unmapped_count(), 1u);
  ChunkTable b(std::move(a));
  EXPECT_EQ(b.unmapped_count(), 1u);
  EXPECT_EQ(a.unmapped_count(), 0u);  // NOLINT(bugprone-use-after-move): the contract under test
  ChunkTable c;
  c = std::move(b);
  EXPECT_EQ(c.unmapped_count(), 1u);
}

}  // namespace
}  // namespace memvirt::shim

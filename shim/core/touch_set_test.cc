// Note [touch set], Note [scan block range] and Note [segment windows] on a
// hand-built chunk table (no driver: no chunk is evicting).
#include "shim/core/touch_set.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace memvirt::shim {
namespace {

using ::testing::Test;

constexpr CUdeviceptr kBase = 1ull << 40;
constexpr uint32_t kChunks = 32;

class TouchSetTest : public Test {
 protected:
  void SetUp() override {
    table_ = ChunkTable(kBase, kChunks);
    table_.Materialize(kChunks);
  }

  // A kLarge block of `count` chunks from `first`, device-resident.
  void MakeBlock(uint32_t first, uint32_t count, bool app_mapped = false) {
    for (uint32_t c = first; c < first + count; ++c) {
      ChunkEntry& e = table_[c];
      e.kind = ChunkKind::kLarge;
      e.owner_first = first;
      e.owner_count = count;
      e.residence = Residence::kDevice;
      e.app_mapped = app_mapped;
    }
  }
  void MakeSlab(uint32_t c) {
    ChunkEntry& e = table_[c];
    e.kind = ChunkKind::kSlab;
    e.owner_first = c;
    e.owner_count = 1;
    e.residence = Residence::kDevice;
  }
  static uint64_t Addr(uint32_t chunk, uint64_t offset = 0) {
    return kBase + (static_cast<uint64_t>(chunk) << kChunkShift) + offset;
  }
  // A layout of `n` 8-byte parameters.
  static ParamLayout WordLayout(size_t n) {
    ParamLayout layout;
    layout.known = true;
    layout.one_word_each = true;
    for (size_t i = 0; i < n; ++i) {
      layout.params.emplace_back(static_cast<uint32_t>(i * 8), 8);
      layout.words.push_back({static_cast<uint32_t>(i), 0});
    }
    return layout;
  }
  // Scans `words` as the launch arguments of one operation.
  void ScanWords(TouchSet* set, std::vector<uint64_t> words) {
    std::vector<void*> params;
    for (uint64_t& w : words) params.push_back(&w);
    set->Args(WordLayout(words.size()), params.data());
  }

  ChunkTable table_;
};

TEST_F(TouchSetTest, ArgsTouchEachNamedBlockOnceInArgumentOrder) {
  MakeBlock(2, 3);
  MakeSlab(7);
  MakeBlock(10, 2);
  TouchSet set(&table_, nullptr);
  set.Begin();
  // Two words into block 2 (the second caught by the block range), the
  // slab, a word past the reservation, a scalar, a word into free chunk 20,
  // block 10 and block 2 again after it (caught by the operation id).
  ScanWords(&set, {Addr(3, 64), Addr(2), Addr(7, 256), Addr(kChunks + 5), 42, Addr(20), Addr(11),
                   Addr(4, 8)});
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{2, 3, 4, 7, 10, 11}));
  EXPECT_TRUE(set.reached().empty());
  for (uint32_t c : {2u, 3u, 4u, 7u, 10u, 11u}) EXPECT_TRUE(set.Contains(table_[c])) << c;
  EXPECT_FALSE(set.Contains(table_[20]));
  EXPECT_FALSE(set.Contains(table_[5]));
}

TEST_F(TouchSetTest, AggregateLayoutsScanEveryWordOfEveryParameter) {
  MakeBlock(0, 1);
  MakeBlock(5, 2);
  ParamLayout layout;
  layout.known = true;
  layout.aggregates = true;
  layout.params = {{0, 24}, {24, 8}};
  layout.words = {{0, 0}, {0, 8}, {0, 16}, {1, 0}};
  uint64_t aggregate[3] = {7, Addr(6, 100), 9};
  uint64_t word = Addr(0);
  void* params[2] = {aggregate, &word};
  TouchSet set(&table_, nullptr);
  set.Begin();
  set.Args(layout, params);
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{5, 6, 0}));
}

TEST_F(TouchSetTest, BeginStartsAnOperationWithNothingTouched) {
  MakeBlock(1, 2);
  TouchSet set(&table_, nullptr);
  set.Begin();
  ScanWords(&set, {Addr(1)});
  const uint64_t first_op = set.op();
  EXPECT_EQ(table_[1].stamp, first_op);
  set.Begin();
  EXPECT_GT(set.op(), first_op);
  EXPECT_TRUE(set.touched().empty());
  EXPECT_FALSE(set.Contains(table_[1]));
  EXPECT_EQ(table_[1].stamp, first_op);  // its recency is the last use's
  ScanWords(&set, {Addr(2)});
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(table_[2].stamp, set.op());
}

TEST_F(TouchSetTest, ClearEmptiesTheListsButKeepsTheOperationsChunks) {
  MakeBlock(3, 2);
  TouchSet set(&table_, nullptr);
  set.Begin();
  set.Chunk(3);
  set.Clear();
  EXPECT_TRUE(set.touched().empty());
  EXPECT_TRUE(set.Contains(table_[3]));
  set.Chunk(3);  // already the operation's: not listed again
  set.Chunk(4);
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{4}));
}

TEST_F(TouchSetTest, RangeTouchesTheOwnedChunksItOverlaps) {
  MakeBlock(0, 4);
  table_[4].kind = ChunkKind::kReserved;  // an application range with nothing of ours
  MakeBlock(5, 1);
  MakeBlock(30, 2);
  TouchSet set(&table_, nullptr);
  set.Begin();
  // From the middle of chunk 1 to one byte into chunk 5.
  set.Range({Addr(1, kChunkBytes / 2), 4 * kChunkBytes});
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{1, 2, 3, 5}));
  set.Range({Addr(2), 0});     // empty: nothing
  set.Range({kBase - 8, 64});  // before the reservation: nothing
  EXPECT_EQ(set.touched().size(), 4u);
  set.Range({Addr(31, 8), 10 * kChunkBytes});  // clamped to the table's end
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{1, 2, 3, 5, 31}));
}

TEST_F(TouchSetTest, BytesScansWholeWordsOnly) {
  MakeBlock(8, 1);
  MakeBlock(9, 1);
  const uint64_t words[2] = {Addr(8, 16), Addr(9)};
  TouchSet set(&table_, nullptr);
  set.Begin();
  set.Bytes(words, sizeof(words) - 1);  // the second word is cut short
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{8}));
  set.Bytes(words, sizeof(words));
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{8, 9}));
}

TEST_F(TouchSetTest, SegmentsTouchAWindowAndReachTheRestOfTheBlock) {
  MakeBlock(4, 10, /*app_mapped=*/true);
  table_[9].residence = Residence::kHost;  // mapped through its host slot
  table_[10].residence = Residence::kHost;
  table_.SetUnmapped(10, true);  // nothing mapped: paged in as if touched
  table_[11].residence = Residence::kUnbacked;
  MakeBlock(20, 1);
  TouchSet set(&table_, nullptr);
  set.Begin();
  // Two words into the segment (every one counts, even into one block) and
  // a plain block between them.
  ScanWords(&set, {Addr(6, 8), Addr(20), Addr(12)});
  ASSERT_TRUE(set.has_segment_hits());
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{20}));
  set.Segments(/*window=*/2);
  EXPECT_FALSE(set.has_segment_hits());
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{20, 6, 7, 12, 13, 10, 11}));
  EXPECT_EQ(set.reached(), (std::vector<uint32_t>{4, 5, 8, 9}));
  for (uint32_t c = 4; c < 14; ++c) EXPECT_TRUE(set.Contains(table_[c])) << c;
}

TEST_F(TouchSetTest, SegmentWindowIsAtLeastOneChunkAndEndsWithTheBlock) {
  MakeBlock(0, 3, /*app_mapped=*/true);
  TouchSet set(&table_, nullptr);
  set.Begin();
  ScanWords(&set, {Addr(2, 8)});
  set.Segments(/*window=*/0);
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{2}));
  EXPECT_EQ(set.reached(), (std::vector<uint32_t>{0, 1}));
  set.Begin();
  ScanWords(&set, {Addr(1)});
  set.Segments(/*window=*/100);
  EXPECT_EQ(set.touched(), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(set.reached(), (std::vector<uint32_t>{0}));
}

}  // namespace
}  // namespace memvirt::shim

// FillBatch over the fake driver: a host-tier chunk paged in as the core does
// it, then the fill committed or undone; where the bytes are is checked by
// checksum.
#include "shim/core/fill_batch.h"

#include <gtest/gtest.h>

#include <memory>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim {
namespace {

class FillBatchTest : public testing::TransitionTest {
 protected:
  static constexpr uint32_t kChunks = 4;

  FillBatchTest() : TransitionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitParts(/*device_chunks=*/2, /*host_chunks=*/2), CUDA_SUCCESS);
    releases_ = std::make_unique<HostSlotReleases>(pool_.get(), tracker_.get(), copy_index_);
    fills_ = std::make_unique<FillBatch>(parts(), releases_.get(), /*spill=*/nullptr);
  }
  // Pages `c` in as ShimCore::PageIn does: a device chunk mapped at its
  // address, the slot's bytes copied on the (held) copy stream.
  void PageIn(uint32_t c) {
    ChunkEntry& e = table_[c];
    uint32_t dev = 0;
    ASSERT_EQ(pool_->AcquireDevice(&dev), CUDA_SUCCESS);
    ASSERT_EQ(pool_->UnmapAt(Address(c)), CUDA_SUCCESS);
    ASSERT_EQ(pool_->MapAt(Address(c), pool_->device_handle(dev)), CUDA_SUCCESS);
    ASSERT_EQ(faults_.driver().cuMemcpyDtoDAsync_v2(Address(c), pool_->mirror(e.phys), kChunkBytes,
                                                    copy_stream_),
              CUDA_SUCCESS);
    fills_->AddHostFill(c, e.phys);
    e.residence = Residence::kDevice;
    e.phys = dev;
  }

  std::unique_ptr<HostSlotReleases> releases_;
  std::unique_ptr<FillBatch> fills_;
};

TEST_F(FillBatchTest, ACommittedFillGivesItsSlotBackOnceTheCopyCompleted) {
  fake_.Hold(copy_stream_);
  MakeHostChunk(0, 1);
  MakeHostChunk(1, 2);
  PageIn(0);
  PageIn(1);
  EXPECT_EQ(fills_->size(), 2u);
  const uint64_t seq = fills_->Mark();
  ASSERT_NE(seq, 0u);
  EXPECT_EQ(table_[0].fill_seq, seq);
  EXPECT_EQ(table_[1].fill_seq, seq);
  fills_->Commit(seq);
  EXPECT_EQ(fills_->size(), 0u);
  ASSERT_FALSE(releases_->empty());
  EXPECT_EQ(releases_->last_copy_seq(), seq);
  releases_->ReleaseCompleted();
  EXPECT_EQ(pool_->host_in_use(), 2u) << "the copies may still read the slots";
  fake_.Release(copy_stream_);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, seq), CUDA_SUCCESS);
  releases_->ReleaseCompleted();
  EXPECT_TRUE(releases_->empty());
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 1));
  EXPECT_EQ(BytesAt(Address(1)), PatternChecksum(kChunkBytes, 2));
}

TEST_F(FillBatchTest, UndoPutsEveryChunkBackInItsSlotWithItsBytes) {
  const uint32_t slot0 = MakeHostChunk(0, 1);
  const uint32_t slot1 = MakeHostChunk(1, 2);
  PageIn(0);
  PageIn(1);
  ASSERT_NE(fills_->Mark(), 0u);
  fills_->Undo();
  EXPECT_EQ(fills_->size(), 0u);
  for (uint32_t c : {0u, 1u}) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kHost) << c;
    EXPECT_EQ(e.fill_seq, 0u) << c;
    EXPECT_FALSE(e.unmapped) << c;
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes)) << c;
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, c + 1)) << c;
  }
  EXPECT_EQ(table_[0].phys, slot0);
  EXPECT_EQ(table_[1].phys, slot1);
  EXPECT_EQ(pool_->device_in_use(), 0u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{1, 0}));  // newest fill first
}

TEST_F(FillBatchTest, AnUndoWhoseMapFailsLeavesTheChunkMarkedUnmappedInItsSlot) {
  const uint32_t slot = MakeHostChunk(0, 7);
  PageIn(0);
  (void)fills_->Mark();
  faults_.FailMemMap(1);
  fills_->Undo();
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kHost);
  EXPECT_EQ(e.phys, slot);
  EXPECT_TRUE(e.unmapped);
  EXPECT_EQ(table_.unmapped_count(), 1u);
  EXPECT_FALSE(fake_.IsMapped(Address(0), kChunkBytes));
  EXPECT_EQ(BytesAt(pool_->mirror(slot)), PatternChecksum(kChunkBytes, 7)) << "bytes kept";
  ASSERT_EQ(fills_->MapHostSlot(0), CUDA_SUCCESS);  // the next use maps it
  EXPECT_FALSE(table_[0].unmapped);
  EXPECT_EQ(table_.unmapped_count(), 0u);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 7));
}

TEST_F(FillBatchTest, NoHostFillNoSequenceNumber) {
  EXPECT_EQ(fills_->Mark(), 0u);
  const uint64_t issued = tracker_->issued(copy_index_);
  fills_->Commit(0);
  EXPECT_EQ(tracker_->issued(copy_index_), issued);
  EXPECT_TRUE(releases_->empty());
}

}  // namespace
}  // namespace memvirt::shim

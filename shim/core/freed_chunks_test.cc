// Note [freed chunks] over the fake driver: freed chunks keep their backing
// until released, and a release needs an idle chunk and a successful unmap.
#include "shim/core/freed_chunks.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/testing/fake_driver.h"
#include "shim/testing/held_work.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim {
namespace {

class FreedChunksTest : public testing::TransitionTest {
 protected:
  static constexpr uint32_t kChunks = 8;

  FreedChunksTest() : TransitionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitParts(/*device_chunks=*/4, /*host_chunks=*/4), CUDA_SUCCESS);
    uses_ = std::make_unique<ChunkUses>(&table_, tracker_.get(), copy_index_);
    freed_ = std::make_unique<FreedChunks>(parts(), uses_.get());
  }
  void TearDown() override {
    for (CUstream s : fake_.created_streams()) fake_.Release(s);
    TransitionTest::TearDown();
  }

  // Chunk `c` of a freed block, still backed on the device or in a host slot
  // and mapped at its address, then listed.
  void MakeFreed(uint32_t c, Residence where) {
    if (where == Residence::kDevice) {
      MakeDeviceChunk(c, /*seed=*/c, /*live=*/false);
    } else {
      MakeHostChunk(c, /*seed=*/c, /*stamp=*/1, /*live=*/false);
    }
    freed_->Add(c);
  }
  CUstream UseOnHeldStream(uint32_t c) {
    return testing::UseOnHeldStream(&fake_, tracker_.get(), uses_.get(), c);
  }

  std::unique_ptr<ChunkUses> uses_;
  std::unique_ptr<FreedChunks> freed_;
};

TEST_F(FreedChunksTest, ReclaimReleasesOneIdleChunkOfTheWantedKindAtATime) {
  MakeFreed(0, Residence::kHost);
  MakeFreed(1, Residence::kDevice);
  MakeFreed(2, Residence::kDevice);
  freed_->Add(1);  // freed again (a warm block): listed once
  EXPECT_EQ(freed_->size(), 3u);
  EXPECT_EQ(pool_->device_in_use(), 2u);

  FreedChunks::Released r = freed_->ReclaimOne(/*device=*/true, /*host=*/false);
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(table_[1].residence, Residence::kUnbacked);
  EXPECT_FALSE(table_[1].dead_listed);
  EXPECT_FALSE(fake_.IsMapped(Address(1), kChunkBytes));
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_EQ(table_[2].residence, Residence::kDevice);  // one at a time
  EXPECT_EQ(table_[0].residence, Residence::kHost);    // not the wanted kind

  r = freed_->ReclaimOne(/*device=*/false, /*host=*/true);
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(table_[0].residence, Residence::kUnbacked);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(freed_->size(), 1u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(stats_.drops, 2u);
}

TEST_F(FreedChunksTest, ChunksInUseMovingOrExportedStayBacked) {
  MakeFreed(0, Residence::kDevice);
  MakeFreed(1, Residence::kDevice);
  MakeFreed(2, Residence::kDevice);
  table_[0].evicting = true;  // a page-out copy reads it
  table_[1].pinned = true;    // exported
  CUstream held = UseOnHeldStream(2);
  EXPECT_EQ(freed_->ReclaimOne(true, true).chunks, 0u);
  EXPECT_EQ(pool_->device_in_use(), 3u);
  EXPECT_EQ(freed_->size(), 3u);
  fake_.Release(held);
  tracker_->CoverAll();
  EXPECT_EQ(freed_->ReclaimOne(true, true).chunks, 1u);
  EXPECT_EQ(table_[2].residence, Residence::kUnbacked);
}

TEST_F(FreedChunksTest, AReusedOrReleasedChunkLeavesTheListWithoutARelease) {
  MakeFreed(0, Residence::kDevice);
  MakeFreed(1, Residence::kHost);
  table_[0].kind = ChunkKind::kLarge;                    // its address was allocated again: warm
  EXPECT_EQ(freed_->ReleaseHostSlots(1, 1).chunks, 1u);  // chunk 1's slot went back
  EXPECT_EQ(freed_->ReclaimOne(true, true).chunks, 0u);
  EXPECT_EQ(freed_->size(), 0u);
  EXPECT_FALSE(table_[0].dead_listed);
  EXPECT_EQ(table_[0].residence, Residence::kDevice);  // the new block's now
  EXPECT_TRUE(fake_.IsMapped(Address(0), kChunkBytes));
}

TEST_F(FreedChunksTest, ReleaseHostSlotsSkipsDeviceChunksAndChunksInUse) {
  MakeFreed(0, Residence::kHost);
  MakeFreed(1, Residence::kHost);
  MakeFreed(2, Residence::kDevice);
  table_.SetUnmapped(1, true);  // a failed remap: nothing mapped, bytes in the slot
  ASSERT_EQ(faults_.driver().cuMemUnmap(Address(1), kChunkBytes), CUDA_SUCCESS);
  CUstream held = UseOnHeldStream(0);
  const FreedChunks::Released r = freed_->ReleaseHostSlots(0, 3);
  EXPECT_EQ(r.chunks, 1u);
  EXPECT_EQ(table_.unmapped_count(), 0u);
  EXPECT_EQ(table_[1].residence, Residence::kUnbacked);
  EXPECT_FALSE(table_[1].unmapped);
  EXPECT_EQ(table_[0].residence, Residence::kHost);  // still in use
  EXPECT_EQ(table_[2].residence, Residence::kDevice);
  EXPECT_EQ(pool_->host_in_use(), 1u);
  fake_.Release(held);
}

TEST_F(FreedChunksTest, AFailedUnmapKeepsTheChunkListedAndBacked) {
  MakeFreed(0, Residence::kDevice);
  faults_.FailMemUnmap(1);
  EXPECT_EQ(freed_->ReclaimOne(true, false).chunks, 0u);
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  EXPECT_TRUE(table_[0].dead_listed);
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_TRUE(policy_.evicted.empty());
  EXPECT_EQ(freed_->ReclaimOne(true, false).chunks, 1u);  // tried again later
  EXPECT_EQ(pool_->device_in_use(), 0u);
}

}  // namespace
}  // namespace memvirt::shim

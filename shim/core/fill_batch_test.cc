// FillBatch over the fake driver: a host-tier chunk paged in as the core does
// it, then the fill committed or undone; where the bytes are is checked by
// checksum.
#include "shim/core/fill_batch.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/held_work.h"
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
  // Pages `c` in onto a new device chunk; returns that chunk.
  uint32_t PageIn(uint32_t c) {
    uint32_t dev = 0;
    EXPECT_EQ(pool_->AcquireDevice(&dev), CUDA_SUCCESS);
    EXPECT_EQ(fills_->FillFromHost(c, dev), CUDA_SUCCESS);
    return dev;
  }
  // Expects `c` back in host slot `slot`, mapped at its address with the
  // pattern of `seed`, and no device chunk in use.
  void ExpectInSlot(uint32_t c, uint32_t slot, uint64_t seed) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kHost);
    EXPECT_EQ(e.phys, slot);
    EXPECT_FALSE(e.unmapped);
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes));
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, seed));
    EXPECT_EQ(pool_->device_in_use(), 0u) << "the device chunk is released";
    EXPECT_EQ(fills_->size(), 0u);
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

TEST_F(FillBatchTest, AFillMapsTheDeviceChunkAndCopiesTheSlotOnTheCopyStream) {
  fake_.Hold(copy_stream_);
  const uint32_t slot = MakeHostChunk(0, 5);
  const uint32_t dev = PageIn(0);
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kDevice);
  EXPECT_EQ(e.phys, dev);
  EXPECT_EQ(stats_.page_ins, 1u);
  EXPECT_EQ(policy_.resident, (std::vector<uint32_t>{0}));
  EXPECT_EQ(fills_->size(), 1u);
  EXPECT_EQ(BytesAt(pool_->mirror(slot)), PatternChecksum(kChunkBytes, 5)) << "slot untouched";
  EXPECT_NE(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 5)) << "the copy is queued";
  fake_.Release(copy_stream_);
  ASSERT_EQ(tracker_->WaitForAll(), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 5));
}

// Note [failed transitions]: each step of a fill that fails leaves the chunk
// in its slot, mapped at its address with its bytes, and fails the fill.
TEST_F(FillBatchTest, AFailedStepOfAFillLeavesTheChunkInItsSlot) {
  struct Step {
    const char* name;
    std::function<void()> fail;
  };
  const std::vector<Step> steps = {
      {"unmap of the slot", [this] { faults_.FailMemUnmap(1); }},
      {"map of the device chunk", [this] { faults_.FailMemMap(1); }},
      {"copy", [this] { faults_.FailCopy(1); }},
  };
  for (const Step& step : steps) {
    SCOPED_TRACE(step.name);
    const uint32_t slot = MakeHostChunk(0, 9);
    uint32_t dev = 0;
    ASSERT_EQ(pool_->AcquireDevice(&dev), CUDA_SUCCESS);
    step.fail();
    EXPECT_NE(fills_->FillFromHost(0, dev), CUDA_SUCCESS);
    faults_.ClearFaults();
    ExpectInSlot(0, slot, 9);
    EXPECT_EQ(stats_.page_ins, 0u);
    EXPECT_TRUE(policy_.resident.empty());
    ASSERT_EQ(driver_.cuMemUnmap(Address(0), kChunkBytes), CUDA_SUCCESS);
    pool_->ReleaseHost(slot);
  }
}

TEST_F(FillBatchTest, AFailedCopyWhoseDeviceChunkCannotBeUnmappedAbandonsIt) {
  // A chunk whose slot is not mapped (its earlier map failed): the fill
  // unmaps nothing before mapping the device chunk.
  const uint32_t slot = MakeHostChunk(0, 9);
  ASSERT_EQ(driver_.cuMemUnmap(Address(0), kChunkBytes), CUDA_SUCCESS);
  table_.SetUnmapped(0, true);
  uint32_t dev = 0;
  ASSERT_EQ(pool_->AcquireDevice(&dev), CUDA_SUCCESS);
  faults_.FailCopy(1);
  faults_.FailMemUnmap(1);
  EXPECT_NE(fills_->FillFromHost(0, dev), CUDA_SUCCESS);
  faults_.ClearFaults();
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kHost);
  EXPECT_EQ(e.phys, slot);
  EXPECT_TRUE(e.unmapped) << "its address still maps the device chunk";
  EXPECT_EQ(pool_->device_in_use(), 1u) << "a device chunk still mapped is not reused";
  EXPECT_EQ(BytesAt(pool_->mirror(slot)), PatternChecksum(kChunkBytes, 9)) << "bytes kept";
  EXPECT_EQ(fills_->size(), 0u);
}

TEST_F(FillBatchTest, OrderWaitsOnTheStreamAndCommits) {
  CUstream s = fake_.CreateStream();
  const uint32_t index = tracker_->IndexOf(s, /*per_thread=*/false);
  fake_.Hold(copy_stream_);
  MakeHostChunk(0, 3);
  PageIn(0);
  const uint64_t seq = fills_->Mark();
  ASSERT_EQ(fills_->Order(seq, index, /*host_wait=*/false), CUDA_SUCCESS);
  EXPECT_EQ(stats_.host_waits, 0u);
  EXPECT_EQ(fills_->size(), 0u);
  EXPECT_FALSE(releases_->empty()) << "committed: the slot goes back after the copy";
  uint64_t seen = 0;
  fake_.Enqueue(s, [&] { seen = BytesAt(Address(0)); });
  EXPECT_EQ(seen, 0u) << "the stream waits for the fill";
  fake_.Release(copy_stream_);
  const StreamUse after = testing::IssueOn(&fake_, tracker_.get(), s);
  ASSERT_EQ(tracker_->WaitFor(after.stream, after.seq), CUDA_SUCCESS);
  EXPECT_EQ(seen, PatternChecksum(kChunkBytes, 3)) << "the stream ran after the fill";
}

TEST_F(FillBatchTest, AStreamWaitThatCannotBeEnqueuedBecomesAHostWait) {
  CUstream s = fake_.CreateStream();
  const uint32_t index = tracker_->IndexOf(s, /*per_thread=*/false);
  fake_.Hold(copy_stream_);  // a host wait runs it
  MakeHostChunk(0, 3);
  PageIn(0);
  const uint64_t seq = fills_->Mark();
  faults_.FailStreamWaitEvent(1);
  ASSERT_EQ(fills_->Order(seq, index, /*host_wait=*/false), CUDA_SUCCESS);
  EXPECT_EQ(stats_.host_waits, 1u);
  EXPECT_TRUE(tracker_->IsComplete(copy_index_, seq));
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 3));
}

TEST_F(FillBatchTest, FillsThatCannotBeAwaitedAreUndone) {
  fake_.Hold(copy_stream_);
  const uint32_t slot = MakeHostChunk(0, 4);
  PageIn(0);
  const uint64_t seq = fills_->Mark();
  faults_.FailEventSynchronize(8);
  faults_.FailEventQuery(8);
  EXPECT_NE(fills_->Order(seq, copy_index_, /*host_wait=*/true), CUDA_SUCCESS);
  faults_.ClearFaults();
  ExpectInSlot(0, slot, 4);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0}));
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

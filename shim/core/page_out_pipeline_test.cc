// PageOutPipeline over the fake driver: chunks of a small reservation are
// paged out to host slots, and where their bytes are is checked by checksum,
// also when a step fails (Note [failed transitions] in shim_core.h).
#include "shim/core/page_out_pipeline.h"

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/fake_driver.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim {
namespace {

// The owner's side of host slots: free slots of the pool only, counted;
// deferred releases recorded.
class RecordingHostSlots final : public PageOutPipeline::HostSlots {
 public:
  CUresult AcquireWaiting(uint32_t* slot) override {
    ++acquisitions;
    return pool->AcquireHost(slot);
  }
  void ReleaseAfter(uint32_t slot, uint64_t copy_seq) override {
    deferred.emplace_back(slot, copy_seq);
  }

  PhysicalPool* pool = nullptr;
  int acquisitions = 0;
  std::vector<std::pair<uint32_t, uint64_t>> deferred;  // (slot, copy_seq)
};

class PageOutPipelineTest : public testing::TransitionTest {
 protected:
  static constexpr uint32_t kChunks = 8;

  PageOutPipelineTest() : TransitionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitParts(/*device_chunks=*/4, /*host_chunks=*/4), CUDA_SUCCESS);
    slots_.pool = pool_.get();
    pipeline_ =
        std::make_unique<PageOutPipeline>(PageOutPipeline::Parts{parts(), /*host_slots=*/&slots_});
  }
  void TearDown() override {
    TransitionTest::TearDown();
    pipeline_.reset();
  }

  uint64_t SlotBytes(uint32_t slot) const { return BytesAt(pool_->mirror(slot)); }

  // `c` is on the device, mapped, not evicting, with the pattern of `seed`.
  void ExpectOnTheDevice(uint32_t c, uint64_t seed) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kDevice) << c;
    EXPECT_FALSE(e.evicting) << c;
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes)) << c;
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, seed)) << c;
  }

  RecordingHostSlots slots_;
  std::unique_ptr<PageOutPipeline> pipeline_;
};

TEST_F(PageOutPipelineTest, VictimsBytesArriveInTheirHostSlotsMappedAtTheirAddresses) {
  MakeDeviceChunk(0, 1);
  MakeDeviceChunk(1, 2);
  EXPECT_TRUE(pipeline_->empty());
  const PageOutPipeline::Started started = pipeline_->Start({0, 1}, /*may_wait=*/false);
  EXPECT_EQ(started.dropped, 0u);
  EXPECT_FALSE(pipeline_->empty());
  for (uint32_t c : {0u, 1u}) {  // copying: still on the device
    EXPECT_TRUE(table_[c].evicting);
    EXPECT_EQ(table_[c].residence, Residence::kDevice);
  }
  EXPECT_EQ(pool_->host_in_use(), 2u);

  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 2u);
  EXPECT_EQ(table_.unmapped_count(), 0u);
  EXPECT_TRUE(pipeline_->empty());
  for (uint32_t c : {0u, 1u}) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kHost);
    EXPECT_FALSE(e.evicting);
    EXPECT_FALSE(e.unmapped);
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes));
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, c + 1));
    EXPECT_EQ(SlotBytes(e.phys),
              PatternChecksum(kChunkBytes, c + 1));  // the slot is what is mapped
  }
  EXPECT_NE(table_[0].phys, table_[1].phys);
  EXPECT_EQ(pool_->device_in_use(), 0u);
  EXPECT_EQ(pool_->host_in_use(), 2u);
  EXPECT_EQ(stats_.evictions, 2u);
  EXPECT_EQ(stats_.host_waits, 1u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(slots_.acquisitions, 0);  // may_wait false: the pool's free slots only
  EXPECT_EQ(fake_.faults(), 0u);

  EXPECT_EQ(pipeline_->Finish().moved, 0u);  // nothing in flight: no wait
  EXPECT_EQ(stats_.host_waits, 1u);
}

TEST_F(PageOutPipelineTest, FinishWaitsForCopiesStillQueued) {
  MakeDeviceChunk(0, 1);
  fake_.Hold(copy_stream_);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  ASSERT_TRUE(table_[0].evicting);
  // The copy has not run; the device chunk is still what is mapped.
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  ASSERT_TRUE(fake_.IsMapped(Address(0), kChunkBytes));
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 1));
  // The wait runs the held stream (the fake's cuEventSynchronize).
  ASSERT_EQ(pipeline_->Finish().moved, 1u);
  EXPECT_EQ(table_[0].residence, Residence::kHost);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 1));
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(PageOutPipelineTest, CancelledMoveKeepsTheDeviceCopyAndReleasesItsSlotAtFinish) {
  MakeDeviceChunk(0, 1);
  fake_.Hold(copy_stream_);  // the copy is still queued when the chunk is used again
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  pipeline_->Cancel(0);
  pipeline_->Cancel(0);  // counted once
  EXPECT_FALSE(table_[0].evicting);
  EXPECT_EQ(stats_.cancelled_page_outs, 1u);
  EXPECT_EQ(pool_->host_in_use(), 1u);  // the copy may still write the slot
  FillPattern(reinterpret_cast<void*>(Address(0)), kChunkBytes, 9);  // the use writes it

  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 0u);
  EXPECT_TRUE(pipeline_->empty());
  ExpectOnTheDevice(0, 9);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_EQ(stats_.evictions, 0u);
  EXPECT_TRUE(policy_.evicted.empty());
}

// Note [fenced page-outs] (shim_core_hidden_reach.cc): every move in flight
// is dropped at once; a move cancelled before is not counted again.
TEST_F(PageOutPipelineTest, CancelAllKeepsEveryChunkOnTheDevice) {
  MakeDeviceChunk(0, 1);
  MakeDeviceChunk(1, 2);
  MakeDeviceChunk(2, 3);
  fake_.Hold(copy_stream_);
  ASSERT_EQ(pipeline_->Start({0, 1, 2}, /*may_wait=*/false).dropped, 0u);
  pipeline_->Cancel(1);
  pipeline_->CancelAll();
  EXPECT_EQ(stats_.cancelled_page_outs, 3u);
  for (uint32_t c : {0u, 1u, 2u}) EXPECT_FALSE(table_[c].evicting) << c;
  EXPECT_EQ(pool_->host_in_use(), 3u);  // the copies may still write the slots
  FillPattern(reinterpret_cast<void*>(Address(2)), kChunkBytes, 9);  // a kernel writes it

  EXPECT_EQ(pipeline_->Finish().moved, 0u);
  EXPECT_TRUE(pipeline_->empty());
  ExpectOnTheDevice(0, 1);
  ExpectOnTheDevice(1, 2);
  ExpectOnTheDevice(2, 9);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(stats_.evictions, 0u);
}

TEST_F(PageOutPipelineTest, DeadVictimsAreDroppedWithoutACopy) {
  MakeDeviceChunk(0, 1, /*live=*/false);  // freed
  MakeDeviceChunk(1, 2, /*live=*/false);
  table_[1].kind = ChunkKind::kLarge;  // part of a live block, but its data is dead
  MakeDeviceChunk(2, 3);
  const uint64_t copies = fake_.copies();
  const PageOutPipeline::Started started = pipeline_->Start({0, 1, 2}, /*may_wait=*/false);
  EXPECT_EQ(started.dropped, 2u);
  EXPECT_EQ(started.dropped_owned, 1u);
  EXPECT_EQ(fake_.copies(), copies + 1);  // chunk 2's only
  for (uint32_t c : {0u, 1u}) {
    EXPECT_EQ(table_[c].residence, Residence::kUnbacked);
    EXPECT_FALSE(table_[c].evicting);
    EXPECT_FALSE(fake_.IsMapped(Address(c), kChunkBytes));
  }
  EXPECT_TRUE(table_[2].evicting);
  EXPECT_EQ(stats_.drops, 2u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_EQ(pool_->host_in_use(), 1u);
  EXPECT_EQ(pipeline_->Finish().moved, 1u);
  EXPECT_EQ(BytesAt(Address(2)), PatternChecksum(kChunkBytes, 3));
}

TEST_F(PageOutPipelineTest, DeadVictimThatCannotBeUnmappedStaysMapped) {
  MakeDeviceChunk(0, 1, /*live=*/false);
  faults_.FailMemUnmap(1);
  EXPECT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  EXPECT_TRUE(fake_.IsMapped(Address(0), kChunkBytes));
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_EQ(stats_.drops, 0u);
  EXPECT_TRUE(pipeline_->empty());
}

TEST_F(PageOutPipelineTest, FailedCopyKeepsTheChunkOnTheDeviceAndStopsTheBatch) {
  MakeDeviceChunk(0, 1);
  MakeDeviceChunk(1, 2);
  MakeDeviceChunk(2, 3);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  faults_.FailCopy(1);
  // 1's copy fails: neither it nor 2 is started; 0 stays in flight.
  EXPECT_EQ(pipeline_->Start({1, 2}, /*may_wait=*/false).dropped, 0u);
  EXPECT_TRUE(table_[0].evicting);
  ExpectOnTheDevice(1, 2);
  ExpectOnTheDevice(2, 3);
  EXPECT_EQ(pool_->host_in_use(), 1u);  // 1's slot went back

  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 1u);
  EXPECT_EQ(table_[0].residence, Residence::kHost);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 1));
  ExpectOnTheDevice(1, 2);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0}));
}

TEST_F(PageOutPipelineTest, TheOwnersSlotsAreAskedOnlyWhenThePipelineMayWait) {
  uint32_t taken[3];  // one host slot left
  for (uint32_t& slot : taken) ASSERT_EQ(pool_->AcquireHost(&slot), CUDA_SUCCESS);
  MakeDeviceChunk(0, 1);
  MakeDeviceChunk(1, 2);
  // One slot: 0 gets it, 1 gets none and is not started.
  EXPECT_EQ(pipeline_->Start({0, 1}, /*may_wait=*/false).dropped, 0u);
  EXPECT_EQ(slots_.acquisitions, 0);
  EXPECT_TRUE(table_[0].evicting);
  EXPECT_FALSE(table_[1].evicting);
  ASSERT_EQ(pipeline_->Finish().moved, 1u);

  EXPECT_EQ(pipeline_->Start({1}, /*may_wait=*/true).dropped, 0u);
  EXPECT_EQ(slots_.acquisitions, 1);  // refused: 1 stays
  EXPECT_TRUE(pipeline_->empty());
  ExpectOnTheDevice(1, 2);
}

TEST_F(PageOutPipelineTest, FailedWaitKeepsEveryChunkOnTheDevice) {
  MakeDeviceChunk(0, 1);
  MakeDeviceChunk(1, 2);
  fake_.Hold(copy_stream_);  // the copies have not run when their wait fails
  ASSERT_EQ(pipeline_->Start({0, 1}, /*may_wait=*/false).dropped, 0u);
  const uint64_t copy_seq = tracker_->issued(copy_index_);
  faults_.FailEventSynchronize(1);

  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 0u);
  EXPECT_TRUE(pipeline_->empty());
  ExpectOnTheDevice(0, 1);
  ExpectOnTheDevice(1, 2);
  EXPECT_EQ(stats_.evictions, 0u);
  EXPECT_EQ(stats_.host_waits, 1u);
  EXPECT_TRUE(policy_.evicted.empty());
  // The slots may still be written: the owner releases them after the copies.
  ASSERT_EQ(slots_.deferred.size(), 2u);
  for (const auto& [slot, seq] : slots_.deferred) EXPECT_EQ(seq, copy_seq);
  EXPECT_NE(slots_.deferred[0].first, slots_.deferred[1].first);
  EXPECT_EQ(pool_->host_in_use(), 2u);
  EXPECT_EQ(pool_->device_in_use(), 2u);
}

TEST_F(PageOutPipelineTest, UnmapFailureKeepsTheChunkOnTheDevice) {
  MakeDeviceChunk(0, 1);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  faults_.FailMemUnmap(1);
  EXPECT_EQ(pipeline_->Finish().moved, 0u);
  ExpectOnTheDevice(0, 1);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(pool_->device_in_use(), 1u);
}

TEST_F(PageOutPipelineTest, HostMapFailureMapsTheDeviceChunkBack) {
  MakeDeviceChunk(0, 1);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  faults_.FailMemMap(1);
  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 0u);
  EXPECT_EQ(table_.unmapped_count(), 0u);
  ExpectOnTheDevice(0, 1);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_TRUE(policy_.evicted.empty());
}

TEST_F(PageOutPipelineTest, HostSetAccessFailureMapsTheDeviceChunkBack) {
  MakeDeviceChunk(0, 1);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  faults_.FailSetAccess(1);
  EXPECT_EQ(pipeline_->Finish().moved, 0u);
  ExpectOnTheDevice(0, 1);
  EXPECT_EQ(pool_->host_in_use(), 0u);
}

TEST_F(PageOutPipelineTest, WhenNoMappingCanBePutBackTheChunkMovesToItsSlotUnmapped) {
  MakeDeviceChunk(0, 1);
  ASSERT_EQ(pipeline_->Start({0}, /*may_wait=*/false).dropped, 0u);
  faults_.FailMemMap(2);  // the host slot's map, then the device chunk's
  const PageOutPipeline::Finished finished = pipeline_->Finish();
  EXPECT_EQ(finished.moved, 1u);
  EXPECT_EQ(table_.unmapped_count(), 1u);
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kHost);
  EXPECT_TRUE(e.unmapped);
  EXPECT_FALSE(fake_.IsMapped(Address(0), kChunkBytes));
  EXPECT_EQ(SlotBytes(e.phys), PatternChecksum(kChunkBytes, 1));  // the bytes are in the slot
  EXPECT_EQ(pool_->device_in_use(), 0u);
  EXPECT_EQ(pool_->host_in_use(), 1u);
  EXPECT_EQ(stats_.evictions, 1u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0}));
}

}  // namespace
}  // namespace memvirt::shim

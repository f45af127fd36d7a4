// Residency over the fake driver: an operation's chunks made resident on a
// device of two chunks (page-ins from host slots, first touches, the host
// fallback, prefetches), the operation ordered after its fills, and each
// wait offered to the core first; where the bytes are is checked by
// checksum.
#include "shim/core/residency.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/core/host_slot_releases.h"
#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/eviction_test.h"
#include "shim/testing/held_work.h"

namespace memvirt::shim {
namespace {

class ResidencyTest : public testing::EvictionTest {
 protected:
  static constexpr uint32_t kChunks = 8;

  ResidencyTest() : EvictionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitEviction(/*device_chunks=*/2, /*host_chunks=*/4), CUDA_SUCCESS);
    MakeEvictor();
    releases_ = std::make_unique<HostSlotReleases>(pool_.get(), tracker_.get(), copy_index_);
    fills_ = std::make_unique<FillBatch>(parts(), releases_.get(), /*spill=*/nullptr);
    residency_ = std::make_unique<Residency>(Residency::Parts{
        .transition = parts(),
        .uses = uses_.get(),
        .touch = touch_.get(),
        .evictor = evictor_.get(),
        .fills = fills_.get(),
        .spill = nullptr,
        .waits = &core_,
        .owner = &core_,
    });
    stream_ = fake_.CreateStream();
    index_ = tracker_->IndexOf(stream_, /*per_thread=*/false);
  }
  void TearDown() override {
    fake_.Release(stream_);
    EvictionTest::TearDown();
    residency_.reset();
    fills_.reset();
    releases_.reset();
  }
  // Makes `chunks` resident for an operation on stream_ (host_wait false).
  CUresult MakeResident(const std::vector<uint32_t>& chunks, bool host_wait = false) {
    touch_->Begin();
    for (uint32_t c : chunks) touch_->Chunk(c);
    EnqueueWindow ticket;
    const CUresult r = residency_->MakeResident(index_, host_wait, /*capturing=*/false,
                                                /*repeating=*/false, &ticket);
    EXPECT_EQ(ticket.open(), r == CUDA_SUCCESS);
    return r;
  }
  // The checksum of `c`'s bytes as work enqueued on stream_ now reads them.
  uint64_t ReadOnStream(uint32_t c) {
    uint64_t seen = 0;
    fake_.Enqueue(stream_, [this, c, &seen] { seen = BytesAt(Address(c)); });
    const StreamUse op = testing::IssueOn(&fake_, tracker_.get(), stream_);
    EXPECT_EQ(tracker_->WaitFor(op.stream, op.seq), CUDA_SUCCESS);
    return seen;
  }

  std::unique_ptr<HostSlotReleases> releases_;
  std::unique_ptr<FillBatch> fills_;
  std::unique_ptr<Residency> residency_;
  CUstream stream_ = nullptr;
  uint32_t index_ = 0;
};

TEST_F(ResidencyTest, AResidentOperationOnlyRecordsItsUses) {
  MakeDeviceChunk(0, 1);
  fake_.Hold(stream_);
  ASSERT_EQ(MakeResident({0}), CUDA_SUCCESS);
  fake_.Enqueue(stream_, [] {});  // the operation's work, held
  EXPECT_FALSE(uses_->Idle(0)) << "the operation's use is recorded";
  EXPECT_EQ(stats_.page_ins + stats_.first_touches, 0u);
  fake_.Release(stream_);
}

TEST_F(ResidencyTest, AHostChunkIsFilledAndTheOperationRunsAfterTheFill) {
  const uint32_t slot = MakeHostChunk(0, 2);
  fake_.Hold(copy_stream_);
  ASSERT_EQ(MakeResident({0}), CUDA_SUCCESS);
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  EXPECT_EQ(stats_.page_ins, 1u);
  EXPECT_EQ(stats_.host_waits, 0u) << "stream-ordered";
  uint64_t seen = 0;
  fake_.Enqueue(stream_, [this, &seen] { seen = BytesAt(Address(0)); });
  EXPECT_EQ(seen, 0u) << "the stream waits for the fill";
  fake_.Release(copy_stream_);
  EXPECT_EQ(ReadOnStream(0), PatternChecksum(kChunkBytes, 2));
  EXPECT_EQ(seen, PatternChecksum(kChunkBytes, 2));
  releases_->ReleaseCompleted();
  EXPECT_EQ(pool_->host_in_use(), 0u) << "slot " << slot << " given back after the copy";
}

TEST_F(ResidencyTest, AHostWaitForTheFillsIsOfferedToTheCoreFirst) {
  MakeHostChunk(0, 3);
  fake_.Hold(copy_stream_);
  core_.defer = true;
  EXPECT_EQ(MakeResident({0}, /*host_wait=*/true), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(core_.deferred_copies.size(), 1u);
  EXPECT_EQ(table_[0].residence, Residence::kDevice) << "the fill stays, committed";
  EXPECT_EQ(table_[0].fill_seq, core_.deferred_copies[0]);
  EXPECT_EQ(stats_.host_waits, 0u);
  fake_.Release(copy_stream_);
  core_.defer = false;
  ASSERT_EQ(MakeResident({0}, /*host_wait=*/true), CUDA_SUCCESS) << "the repeat";
  EXPECT_EQ(stats_.page_ins, 1u) << "filled once";
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 3));
}

TEST_F(ResidencyTest, ABusyHostChunkIsWaitedForBeforeItsPageIn) {
  MakeHostChunk(0, 4);
  CUstream busy = testing::UseOnHeldStream(&fake_, tracker_.get(), uses_.get(), 0);
  core_.defer = true;
  EXPECT_EQ(MakeResident({0}), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(core_.deferred_chunks, (std::vector<uint32_t>{0}));
  EXPECT_EQ(table_[0].residence, Residence::kHost) << "not paged in while its slot is used";
  fake_.Release(busy);
}

TEST_F(ResidencyTest, AnUnbackedChunkIsBackedAtItsFirstTouch) {
  MakeDeviceChunk(0, 5);
  ChunkEntry& e = table_[1];
  e.kind = ChunkKind::kLarge;
  e.owner_first = 1;
  e.owner_count = 1;
  ASSERT_EQ(e.residence, Residence::kUnbacked);
  ASSERT_EQ(MakeResident({1}), CUDA_SUCCESS);
  EXPECT_EQ(e.residence, Residence::kDevice);
  EXPECT_TRUE(fake_.IsMapped(Address(1), kChunkBytes));
  EXPECT_EQ(stats_.first_touches, 1u);
  EXPECT_EQ(core_.backed, 1u);
  EXPECT_EQ(policy_.resident, (std::vector<uint32_t>{1}));
}

// Note [host mapping]: with no device chunk to be had (the device's chunks
// are the operation's own), a host chunk runs from host memory.
TEST_F(ResidencyTest, WithNoDeviceChunkAHostChunkRunsFromHostMemory) {
  MakeDeviceChunk(0, 6);
  MakeDeviceChunk(1, 7);
  MakeHostChunk(2, 8);
  ASSERT_EQ(MakeResident({0, 1, 2}), CUDA_SUCCESS);
  EXPECT_EQ(table_[2].residence, Residence::kHost);
  EXPECT_EQ(stats_.host_fallbacks, 1u);
  EXPECT_EQ(ReadOnStream(2), PatternChecksum(kChunkBytes, 8));
  for (uint32_t c : {0u, 1u}) EXPECT_EQ(table_[c].residence, Residence::kDevice) << c;
}

TEST_F(ResidencyTest, AFailedFillFailsTheOperationAndKeepsTheBytesInTheSlot) {
  const uint32_t slot = MakeHostChunk(0, 9);
  faults_.FailCopy(1);
  EXPECT_NE(MakeResident({0}), CUDA_SUCCESS);
  faults_.ClearFaults();
  EXPECT_EQ(table_[0].residence, Residence::kHost);
  EXPECT_EQ(table_[0].phys, slot);
  EXPECT_EQ(BytesAt(Address(0)), PatternChecksum(kChunkBytes, 9));
  EXPECT_EQ(pool_->device_in_use(), 0u);
}

TEST_F(ResidencyTest, PredictedChunksArePrefetchedIntoFreeRoom) {
  MakeDeviceChunk(0, 10);
  MakeHostChunk(1, 11);
  MakeHostChunk(2, 12);
  policy_.upcoming = {1, 2};
  ASSERT_EQ(MakeResident({0}), CUDA_SUCCESS);
  EXPECT_EQ(table_[1].residence, Residence::kDevice) << "prefetched into the one free chunk";
  EXPECT_EQ(table_[2].residence, Residence::kHost) << "no eviction for a prefetch";
  EXPECT_EQ(stats_.prefetches, 1u);
  EXPECT_EQ(ReadOnStream(1), PatternChecksum(kChunkBytes, 11));
}

}  // namespace
}  // namespace memvirt::shim

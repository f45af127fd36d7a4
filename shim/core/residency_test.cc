// Residency over the fake driver: an operation's chunks made resident on a
// device of two chunks (page-ins from host slots, first touches, the host
// fallback, prefetches), the operation ordered after its fills, and each
// wait offered to the core first; where the bytes are is checked by
// checksum.
#include "shim/core/residency.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/core/chunk_uses.h"
#include "shim/core/host_slot_releases.h"
#include "shim/core/shim_core_test_fixture.h"
#include "shim/core/victim_picker.h"
#include "shim/testing/held_work.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim {
namespace {

// The core's side: defers when told to, waits through ChunkUses, hands out
// the pool's free host slots and counts backed chunks.
class RecordingCore final : public Residency::Owner, public Evictor::Owner, public CoreWaits {
 public:
  bool DeferChunkIdle(uint32_t chunk) override {
    if (!defer) return false;
    deferred_chunks.push_back(chunk);
    return true;
  }
  bool DeferCopyWait(uint64_t copy_seq) override {
    if (!defer) return false;
    deferred_copies.push_back(copy_seq);
    return true;
  }
  CUresult WaitChunkIdle(uint32_t chunk) override { return uses->WaitIdle(chunk); }
  bool WaitsDeferred() const override {
    return !deferred_chunks.empty() || !deferred_copies.empty();
  }
  CUresult AcquireHost(uint32_t* slot) override { return pool->AcquireHost(slot); }
  void OnOwnedBacked() override { ++backed; }
  bool ReclaimFreedDevice() override { return false; }
  void OnOwnedDropped(uint32_t) override {}

  bool defer = false;
  ChunkUses* uses = nullptr;
  PhysicalPool* pool = nullptr;
  std::vector<uint32_t> deferred_chunks;
  std::vector<uint64_t> deferred_copies;
  uint32_t backed = 0;
};

class FreeHostSlots final : public PageOutPipeline::HostSlots {
 public:
  CUresult AcquireWaiting(uint32_t* slot) override { return pool->AcquireHost(slot); }
  void ReleaseAfter(uint32_t slot, uint64_t) override { pool->ReleaseHost(slot); }
  PhysicalPool* pool = nullptr;
};

class ResidencyTest : public testing::TransitionTest {
 protected:
  static constexpr uint32_t kChunks = 8;

  ResidencyTest() : TransitionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitParts(/*device_chunks=*/2, /*host_chunks=*/4), CUDA_SUCCESS);
    uses_ = std::make_unique<ChunkUses>(&table_, tracker_.get(), copy_index_);
    slots_.pool = pool_.get();
    page_out_ = std::make_unique<PageOutPipeline>(PageOutPipeline::Parts{parts(), &slots_});
    touch_ = std::make_unique<TouchSet>(&table_, page_out_.get());
    touch_->Begin();  // operation 1: the one that last used the host chunks made below
    picker_ = std::make_unique<VictimPicker>(&table_, uses_.get(), &policy_, touch_.get());
    core_.uses = uses_.get();
    core_.pool = pool_.get();
    evictor_ = std::make_unique<Evictor>(Evictor::Parts{
        .page_out = page_out_.get(),
        .picker = picker_.get(),
        .tracker = tracker_.get(),
        .copy_index = copy_index_,
        .uses = uses_.get(),
        .pool = pool_.get(),
        .waits = &core_,
        .owner = &core_,
    });
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
    TransitionTest::TearDown();
    residency_.reset();
    fills_.reset();
    releases_.reset();
    evictor_.reset();
    picker_.reset();
    touch_.reset();
    page_out_.reset();
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

  std::unique_ptr<ChunkUses> uses_;
  FreeHostSlots slots_;
  std::unique_ptr<PageOutPipeline> page_out_;
  std::unique_ptr<TouchSet> touch_;
  std::unique_ptr<VictimPicker> picker_;
  RecordingCore core_;
  std::unique_ptr<Evictor> evictor_;
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

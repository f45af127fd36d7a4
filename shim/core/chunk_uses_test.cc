// Note [chunk uses], against the fake driver: held streams keep work pending.
#include "shim/core/chunk_uses.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

class ChunkUsesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ = ChunkTable(/*base=*/1ull << 40, /*capacity=*/4);
    table_.Materialize(4);
    copy_ = fake_.CreateStream();
    tracker_ = std::make_unique<StreamTracker>(&fake_.driver(), /*event_batch=*/1000);
    copy_index_ = tracker_->Adopt(copy_);
    uses_ = std::make_unique<ChunkUses>(&table_, tracker_.get(), copy_index_);
  }
  void TearDown() override {
    for (CUstream s : fake_.created_streams()) fake_.Release(s);
    (void)tracker_->WaitForAll();
  }

  // A stream of the application, its index and the seq of one operation
  // issued on it (enqueued on the fake as nothing, so that its event
  // completes when the stream runs).
  struct Op {
    CUstream stream;
    uint32_t index;
    uint64_t seq;
  };
  // A new stream of the application whose work stays queued until released.
  CUstream HeldStream() {
    CUstream s = fake_.CreateStream();
    fake_.Hold(s);
    return s;
  }
  Op Issue(CUstream stream) {
    const uint32_t index = tracker_->IndexOf(stream, false);
    const uint64_t seq = tracker_->Issue(index);
    fake_.Enqueue(stream, [] {});
    return {stream, index, seq};
  }

  testing::FakeDriver fake_{64 << 20};
  ChunkTable table_;
  CUstream copy_ = nullptr;
  std::unique_ptr<StreamTracker> tracker_;
  uint32_t copy_index_ = 0;
  std::unique_ptr<ChunkUses> uses_;
};

TEST_F(ChunkUsesTest, AChunkIsIdleOnceItsUseOnEveryStreamCompleted) {
  CUstream a = HeldStream(), b = HeldStream();
  const Op on_a = Issue(a), on_b = Issue(b);
  uses_->Add(0, on_a.index, on_a.seq);
  uses_->Add(0, on_b.index, on_b.seq);
  EXPECT_TRUE(uses_->Idle(1)) << "no use of chunk 1";
  EXPECT_FALSE(uses_->Idle(0));
  std::vector<StreamUse> pending;
  EXPECT_EQ(uses_->CollectPending(0, &pending), 2u);
  fake_.Release(a);
  tracker_->CoverAll();
  EXPECT_FALSE(uses_->Idle(0)) << "stream b's use is still queued";
  pending.clear();
  ASSERT_EQ(uses_->CollectPending(0, &pending), 1u);
  EXPECT_EQ(pending[0].stream, on_b.index);
  EXPECT_EQ(pending[0].seq, on_b.seq);
  fake_.Release(b);
  tracker_->CoverAll();
  EXPECT_TRUE(uses_->Idle(0));
  EXPECT_EQ(table_[0].num_uses, 0) << "completed uses are forgotten";
}

TEST_F(ChunkUsesTest, ANewerUseOnTheSameStreamReplacesTheOlder) {
  CUstream a = HeldStream();
  const Op first = Issue(a), second = Issue(a);
  uses_->Add(0, first.index, first.seq);
  uses_->Add(0, second.index, second.seq);
  EXPECT_EQ(table_[0].num_uses, 1);
  EXPECT_EQ(table_[0].uses[0].seq, second.seq);
}

TEST_F(ChunkUsesTest, MoreStreamsThanUseSlotsOverflowToEveryStream) {
  std::vector<CUstream> streams;
  for (int i = 0; i <= kMaxUses; ++i) {
    streams.push_back(HeldStream());
    const Op op = Issue(streams.back());
    uses_->Add(0, op.index, op.seq);
  }
  EXPECT_TRUE(table_[0].use_overflow);
  // Work on another stream, unrelated to the chunk, keeps it busy while it
  // overflows: conservative, never early.
  CUstream other = HeldStream();
  (void)Issue(other);
  for (CUstream s : streams) fake_.Release(s);
  tracker_->CoverAll();
  EXPECT_FALSE(uses_->Idle(0));
  fake_.Release(other);
  tracker_->CoverAll();
  EXPECT_TRUE(uses_->Idle(0));
  EXPECT_FALSE(table_[0].use_overflow);
}

TEST_F(ChunkUsesTest, CompletedUsesMakeRoomBeforeTheEntryOverflows) {
  std::vector<CUstream> streams;
  for (int i = 0; i < kMaxUses; ++i) {
    streams.push_back(fake_.CreateStream());
    const Op op = Issue(streams.back());  // not held: completes
    uses_->Add(0, op.index, op.seq);
  }
  tracker_->CoverAll();
  CUstream busy = HeldStream();
  const Op op = Issue(busy);
  uses_->Add(0, op.index, op.seq);
  EXPECT_FALSE(table_[0].use_overflow);
  EXPECT_EQ(table_[0].num_uses, 1);
  EXPECT_FALSE(uses_->Idle(0));
}

TEST_F(ChunkUsesTest, AFenceIsAUseOfEveryChunkUntilItCompletes) {
  CUstream a = HeldStream();
  const uint64_t fences = uses_->fences();
  const Op fence = Issue(a);
  uses_->AddFence(fence.index, fence.seq);
  EXPECT_EQ(uses_->fences(), fences + 1);
  for (uint32_t c = 0; c < 4; ++c) EXPECT_FALSE(uses_->Idle(c)) << c;
  std::vector<StreamUse> pending;
  EXPECT_EQ(uses_->CollectPending(3, &pending), 1u);
  fake_.Release(a);
  tracker_->CoverAll();
  uses_->DropCompletedFences();
  for (uint32_t c = 0; c < 4; ++c) EXPECT_TRUE(uses_->Idle(c)) << c;
}

// Note [eviction] in shim_core.h: pending work on the given stream does not
// count, work on any other stream does, and so does an overflowed entry.
TEST_F(ChunkUsesTest, PendingOnlyOnLooksAtTheOtherStreamsWork) {
  CUstream a = HeldStream(), b = HeldStream();
  const Op on_a = Issue(a), on_b = Issue(b);
  uses_->Add(0, on_a.index, on_a.seq);
  EXPECT_TRUE(uses_->PendingOnlyOn(0, on_a.index));
  EXPECT_FALSE(uses_->PendingOnlyOn(0, on_b.index));
  uses_->AddFence(on_b.index, on_b.seq);  // b's fence is a use of every chunk
  EXPECT_FALSE(uses_->PendingOnlyOn(0, on_a.index));
  EXPECT_FALSE(uses_->PendingOnlyOn(1, on_a.index));
  fake_.Release(b);
  tracker_->CoverAll();
  EXPECT_TRUE(uses_->PendingOnlyOn(0, on_a.index)) << "b's work completed";
  table_[2].use_overflow = true;
  EXPECT_FALSE(uses_->PendingOnlyOn(2, on_a.index));
}

TEST_F(ChunkUsesTest, APendingFillKeepsTheChunkBusy) {
  fake_.Hold(copy_);
  const Op fill = Issue(copy_);
  table_[2].fill_seq = fill.seq;
  EXPECT_FALSE(uses_->Idle(2));
  // The fake runs held work when the host waits for it.
  ASSERT_EQ(uses_->WaitIdle(2), CUDA_SUCCESS);
  EXPECT_TRUE(uses_->Idle(2));
}

TEST_F(ChunkUsesTest, WaitIdleWaitsForEveryUseAndForgetsThem) {
  CUstream a = HeldStream(), b = HeldStream();
  const Op on_a = Issue(a), fence = Issue(b);
  uses_->Add(1, on_a.index, on_a.seq);
  uses_->AddFence(fence.index, fence.seq);
  ASSERT_EQ(uses_->WaitIdle(1), CUDA_SUCCESS);
  EXPECT_TRUE(tracker_->IsComplete(on_a.index, on_a.seq));
  EXPECT_TRUE(tracker_->IsComplete(fence.index, fence.seq));
  EXPECT_EQ(table_[1].num_uses, 0);
  EXPECT_TRUE(uses_->Idle(1));
}

}  // namespace
}  // namespace memvirt::shim

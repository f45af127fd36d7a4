// Note [chunk uses], against the fake driver: held streams keep work pending.
#include "shim/core/chunk_uses.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/testing/fake_driver.h"
#include "shim/testing/held_work.h"

namespace memvirt::shim {
namespace {

class ChunkUsesTest : public testing::HeldWorkTest {
 protected:
  ChunkUsesTest() : HeldWorkTest(/*chunks=*/4) {}
};

TEST_F(ChunkUsesTest, AChunkIsIdleOnceItsUseOnEveryStreamCompleted) {
  CUstream a = HeldStream(), b = HeldStream();
  const StreamUse on_a = Issue(a), on_b = Issue(b);
  uses_->Add(0, on_a.stream, on_a.seq);
  uses_->Add(0, on_b.stream, on_b.seq);
  EXPECT_TRUE(uses_->Idle(1)) << "no use of chunk 1";
  EXPECT_FALSE(uses_->Idle(0));
  std::vector<StreamUse> pending;
  EXPECT_EQ(uses_->CollectPending(0, &pending), 2u);
  fake_.Release(a);
  tracker_->CoverAll();
  EXPECT_FALSE(uses_->Idle(0)) << "stream b's use is still queued";
  pending.clear();
  ASSERT_EQ(uses_->CollectPending(0, &pending), 1u);
  EXPECT_EQ(pending[0].stream, on_b.stream);
  EXPECT_EQ(pending[0].seq, on_b.seq);
  fake_.Release(b);
  tracker_->CoverAll();
  EXPECT_TRUE(uses_->Idle(0));
  EXPECT_EQ(table_[0].num_uses, 0) << "completed uses are forgotten";
}

TEST_F(ChunkUsesTest, ANewerUseOnTheSameStreamReplacesTheOlder) {
  CUstream a = HeldStream();
  const StreamUse first = Issue(a), second = Issue(a);
  uses_->Add(0, first.stream, first.seq);
  uses_->Add(0, second.stream, second.seq);
  EXPECT_EQ(table_[0].num_uses, 1);
  EXPECT_EQ(table_[0].uses[0].seq, second.seq);
}

TEST_F(ChunkUsesTest, MoreStreamsThanUseSlotsOverflowToEveryStream) {
  std::vector<CUstream> streams;
  for (int i = 0; i <= kMaxUses; ++i) {
    streams.push_back(HeldStream());
    const StreamUse op = Issue(streams.back());
    uses_->Add(0, op.stream, op.seq);
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
    const StreamUse op = Issue(streams.back());  // not held: completes
    uses_->Add(0, op.stream, op.seq);
  }
  tracker_->CoverAll();
  CUstream busy = HeldStream();
  const StreamUse op = Issue(busy);
  uses_->Add(0, op.stream, op.seq);
  EXPECT_FALSE(table_[0].use_overflow);
  EXPECT_EQ(table_[0].num_uses, 1);
  EXPECT_FALSE(uses_->Idle(0));
}

TEST_F(ChunkUsesTest, AFenceIsAUseOfEveryChunkUntilItCompletes) {
  CUstream a = HeldStream();
  const uint64_t fences = uses_->fences();
  const StreamUse fence = Issue(a);
  uses_->AddFence(fence.stream, fence.seq);
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
  const StreamUse on_a = Issue(a), on_b = Issue(b);
  uses_->Add(0, on_a.stream, on_a.seq);
  EXPECT_TRUE(uses_->PendingOnlyOn(0, on_a.stream));
  EXPECT_FALSE(uses_->PendingOnlyOn(0, on_b.stream));
  uses_->AddFence(on_b.stream, on_b.seq);  // b's fence is a use of every chunk
  EXPECT_FALSE(uses_->PendingOnlyOn(0, on_a.stream));
  EXPECT_FALSE(uses_->PendingOnlyOn(1, on_a.stream));
  fake_.Release(b);
  tracker_->CoverAll();
  EXPECT_TRUE(uses_->PendingOnlyOn(0, on_a.stream)) << "b's work completed";
  table_[2].use_overflow = true;
  EXPECT_FALSE(uses_->PendingOnlyOn(2, on_a.stream));
}

TEST_F(ChunkUsesTest, APendingFillKeepsTheChunkBusy) {
  fake_.Hold(copy_);
  const StreamUse fill = Issue(copy_);
  table_[2].fill_seq = fill.seq;
  EXPECT_FALSE(uses_->Idle(2));
  // The fake runs held work when the host waits for it.
  ASSERT_EQ(uses_->WaitIdle(2), CUDA_SUCCESS);
  EXPECT_TRUE(uses_->Idle(2));
}

TEST_F(ChunkUsesTest, WaitIdleWaitsForEveryUseAndForgetsThem) {
  CUstream a = HeldStream(), b = HeldStream();
  const StreamUse on_a = Issue(a), fence = Issue(b);
  uses_->Add(1, on_a.stream, on_a.seq);
  uses_->AddFence(fence.stream, fence.seq);
  ASSERT_EQ(uses_->WaitIdle(1), CUDA_SUCCESS);
  EXPECT_TRUE(tracker_->IsComplete(on_a.stream, on_a.seq));
  EXPECT_TRUE(tracker_->IsComplete(fence.stream, fence.seq));
  EXPECT_EQ(table_[1].num_uses, 0);
  EXPECT_TRUE(uses_->Idle(1));
}

}  // namespace
}  // namespace memvirt::shim

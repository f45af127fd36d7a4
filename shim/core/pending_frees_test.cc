// Note [pending frees] against the fake driver: held streams keep the work
// that uses a freed block pending.
#include "shim/core/pending_frees.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/testing/fake_driver.h"
#include "shim/testing/held_work.h"

namespace memvirt::shim {
namespace {

constexpr uint32_t kChunks = 8;

class PendingFreesTest : public testing::HeldWorkTest {
 protected:
  PendingFreesTest() : HeldWorkTest(kChunks) {
    MakeBlock(0, 3);
    MakeBlock(3, 1);
    MakeBlock(4, 2);
    pending_ = std::make_unique<PendingFrees>(&table_, uses_.get(), tracker_.get());
  }

  static uint64_t Offset(uint32_t chunk) { return static_cast<uint64_t>(chunk) << kChunkShift; }
  std::vector<uint64_t> Released() {
    std::vector<uint64_t> freed;
    pending_->ReleaseCompleted([&](uint64_t offset) { freed.push_back(offset); });
    return freed;
  }

  std::unique_ptr<PendingFrees> pending_;
};

TEST_F(PendingFreesTest, AFreedBlockIsReleasedOnceEveryChunkIsIdle) {
  CUstream a = HeldStream(), b = HeldStream();
  const StreamUse on_a = Issue(a), on_b = Issue(b);
  uses_->Add(1, on_a.stream, on_a.seq);  // the middle chunk on stream a
  uses_->Add(2, on_b.stream, on_b.seq);  // the last on stream b
  EXPECT_FALSE(pending_->BlockIdle(Offset(0)));
  EXPECT_TRUE(pending_->BlockIdle(Offset(3)));
  EXPECT_TRUE(pending_->BlockIdle(Offset(7))) << "no block: nothing uses it";
  pending_->AddUntilIdle(Offset(0));
  EXPECT_TRUE(pending_->Contains(Offset(0)));
  EXPECT_FALSE(pending_->Contains(Offset(3)));
  EXPECT_TRUE(Released().empty());
  fake_.Release(a);
  tracker_->CoverAll();
  EXPECT_TRUE(Released().empty()) << "chunk 2 is still used on stream b";
  fake_.Release(b);
  tracker_->CoverAll();
  EXPECT_EQ(Released(), std::vector<uint64_t>{Offset(0)});
  EXPECT_TRUE(pending_->empty());
  EXPECT_FALSE(pending_->Contains(Offset(0)));
}

TEST_F(PendingFreesTest, AnAsyncFreeIsReleasedOnceItsStreamReachedIt) {
  CUstream s = HeldStream();
  const StreamUse before = Issue(s);
  pending_->AddAfter(Offset(3), before.stream, before.seq);
  (void)Issue(s);                     // later work on the stream does not delay it
  pending_->AddUntilIdle(Offset(4));  // idle: released at the first poll
  EXPECT_EQ(Released(), std::vector<uint64_t>{Offset(4)});
  EXPECT_EQ(pending_->size(), 1u);
  fake_.Release(s);
  tracker_->CoverAll();
  EXPECT_EQ(Released(), std::vector<uint64_t>{Offset(3)});
}

TEST_F(PendingFreesTest, CollectWaitsNamesTheWorkNotKnownComplete) {
  CUstream a = HeldStream(), b = HeldStream();
  const StreamUse on_a = Issue(a), on_b = Issue(b);
  uses_->Add(4, on_a.stream, on_a.seq);
  pending_->AddUntilIdle(Offset(4));
  pending_->AddAfter(Offset(3), on_b.stream, on_b.seq);
  std::vector<StreamUse> waits;
  EXPECT_TRUE(pending_->CollectWaits(&waits));
  ASSERT_EQ(waits.size(), 2u);
  EXPECT_EQ(waits[0].stream, on_a.stream);
  EXPECT_EQ(waits[0].seq, on_a.seq);
  EXPECT_EQ(waits[1].stream, on_b.stream);
  EXPECT_EQ(waits[1].seq, on_b.seq);
  fake_.Release(a);
  fake_.Release(b);
  tracker_->CoverAll();
  waits.clear();
  EXPECT_FALSE(pending_->CollectWaits(&waits));
  EXPECT_TRUE(waits.empty());
}

TEST_F(PendingFreesTest, WaitAllWaitsForEveryEntrysWork) {
  CUstream a = HeldStream(), b = HeldStream();
  const StreamUse on_a = Issue(a), on_b = Issue(b);
  uses_->Add(0, on_a.stream, on_a.seq);
  pending_->AddUntilIdle(Offset(0));
  pending_->AddAfter(Offset(3), on_b.stream, on_b.seq);
  EXPECT_EQ(pending_->WaitAll(), 3u);  // one per chunk of the first block
  // The fake's waits ran the held streams: both entries are complete now.
  EXPECT_EQ(Released(), (std::vector<uint64_t>{Offset(0), Offset(3)}));
}

}  // namespace
}  // namespace memvirt::shim

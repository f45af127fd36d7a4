// Evictor over the fake driver: a device of four chunks, full, and an
// eviction for one more; which chunks go (the policy's order, the candidate
// rule), when the owner is asked to defer or to wait, and where the bytes are
// afterwards (checksums).
#include "shim/core/evictor.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/eviction_test.h"
#include "shim/testing/held_work.h"

namespace memvirt::shim {
namespace {

class EvictorTest : public testing::EvictionTest {
 protected:
  static constexpr uint32_t kChunks = 8;
  static constexpr uint32_t kDeviceChunks = 4;

  EvictorTest() : EvictionTest(kChunks) {}
  void SetUp() override {
    ASSERT_EQ(InitEviction(kDeviceChunks, /*host_chunks=*/4), CUDA_SUCCESS);
    for (uint32_t c = 0; c < kDeviceChunks; ++c) MakeDeviceChunk(c, 10 + c);
    policy_.victim_order = {2, 0, 3, 1};
  }
  // `c` paged out: in a host slot, mapped at its address, with its bytes.
  void ExpectInHostTier(uint32_t c) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kHost) << c;
    EXPECT_FALSE(e.evicting) << c;
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes)) << c;
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, 10 + c)) << c;
  }
  void ExpectOnDevice(uint32_t c) {
    EXPECT_EQ(table_[c].residence, Residence::kDevice) << c;
    EXPECT_FALSE(table_[c].evicting) << c;
    EXPECT_EQ(BytesAt(Address(c)), PatternChecksum(kChunkBytes, 10 + c)) << c;
  }
  CUstream UseOnHeldStream(uint32_t c) {
    return testing::UseOnHeldStream(&fake_, tracker_.get(), uses_.get(), c);
  }
};

TEST_F(EvictorTest, AFreeDeviceChunkIsTakenWithoutEvicting) {
  MakeEvictor();
  pool_->ReleaseDevice(table_[1].phys);  // as if chunk 1's block had been freed
  table_[1].residence = Residence::kUnbacked;
  ASSERT_EQ(driver_.cuMemUnmap(Address(1), kChunkBytes), CUDA_SUCCESS);
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  EXPECT_NE(dev, kNoIndex);
  EXPECT_EQ(pool_->host_in_use(), 0u);
  EXPECT_EQ(stats_.evictions, 0u);
}

TEST_F(EvictorTest, WithoutEvictionAFullDeviceHasNoChunk) {
  MakeEvictor();
  uint32_t dev = 0;
  EXPECT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/false), CUDA_ERROR_OUT_OF_MEMORY);
  for (uint32_t c = 0; c < kDeviceChunks; ++c) ExpectOnDevice(c);
}

TEST_F(EvictorTest, AFreedChunkIsReclaimedBeforeAnyVictim) {
  MakeEvictor();
  // Chunk 3's block was freed: its device chunk stays mapped (Note [freed
  // chunks]).
  const uint32_t spare = table_[3].phys;
  table_[3].kind = ChunkKind::kFree;
  table_[3].live_data = false;
  freed_->Add(3);
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  EXPECT_EQ(dev, spare);
  EXPECT_EQ(table_[3].residence, Residence::kUnbacked);
  EXPECT_FALSE(fake_.IsMapped(Address(3), kChunkBytes));
  EXPECT_EQ(pool_->host_in_use(), 0u) << "nothing paged out";
}

TEST_F(EvictorTest, AMissPagesOutThePolicysFirstIdleCandidate) {
  MakeEvictor();
  touch_->Chunk(2);  // the operation's own: not a candidate
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  ExpectInHostTier(0);
  for (uint32_t c : {1u, 2u, 3u}) ExpectOnDevice(c);
  EXPECT_EQ(stats_.evictions, 1u);
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{0}));
  EXPECT_TRUE(core_.waited.empty());
}

// Note [eviction]: a candidate still in use on another stream is skipped
// for an idle one; when none is idle, the best is waited for, by the owner
// without its lock if it defers, else here.
TEST_F(EvictorTest, AVictimInUseIsWaitedForOnlyWhenNothingIsIdle) {
  MakeEvictor();
  CUstream busy = UseOnHeldStream(2);
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  ExpectInHostTier(0);
  EXPECT_TRUE(core_.waited.empty()) << "an idle chunk went instead";
  fake_.Release(busy);

  // Now every device chunk is in use: chunk 0 back on the device, too.
  ASSERT_EQ(driver_.cuMemUnmap(Address(0), kChunkBytes), CUDA_SUCCESS);
  pool_->ReleaseHost(table_[0].phys);
  pool_->ReleaseDevice(dev);
  MakeDeviceChunk(0, 10);
  for (uint32_t c = 0; c < kDeviceChunks; ++c) UseOnHeldStream(c);
  core_.defer = true;
  EXPECT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(core_.deferred_chunks, (std::vector<uint32_t>{2})) << "the policy's first";
  for (uint32_t c = 0; c < kDeviceChunks; ++c) ExpectOnDevice(c);

  core_.defer = false;  // waited for here (the fake runs the held stream)
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  EXPECT_EQ(core_.waited, (std::vector<uint32_t>{2}));
  ExpectInHostTier(2);
}

TEST_F(EvictorTest, AnOperationsOwnStreamDoesNotMakeAChunkBusy) {
  MakeEvictor();
  CUstream s = UseOnHeldStream(2);
  evictor_->set_launch_stream(tracker_->IndexOf(s, /*per_thread=*/false));
  core_.defer = true;
  uint32_t dev = kNoIndex;
  EXPECT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(core_.deferred_chunks, (std::vector<uint32_t>{2}))
      << "taken though its work is queued, and waited for (deferred)";
  fake_.Release(s);
}

TEST_F(EvictorTest, ADeadVictimIsDroppedWithoutACopyAndReported) {
  MakeEvictor();
  table_[2].live_data = false;  // the policy's first: a live block's chunk never written
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  EXPECT_EQ(table_[2].residence, Residence::kUnbacked);
  EXPECT_EQ(core_.dropped_owned, 1u);
  EXPECT_EQ(pool_->host_in_use(), 0u);
}

// Note [pipelined page-out]: with look-ahead, the next batch starts behind
// the one finished, and the next miss finishes it instead of picking.
TEST_F(EvictorTest, ALookAheadBatchStartsBehindTheMissAndServesTheNextOne) {
  MakeEvictor(/*lookahead_min_chunks=*/kDeviceChunks);
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  ExpectInHostTier(2);
  EXPECT_TRUE(table_[0].evicting) << "the look-ahead page-out, in flight";
  EXPECT_EQ(table_[0].residence, Residence::kDevice);
  uint32_t next = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&next, /*may_evict=*/true), CUDA_SUCCESS);
  ExpectInHostTier(0);
  EXPECT_TRUE(table_[3].evicting) << "and the next look-ahead";
  EXPECT_EQ(policy_.evicted, (std::vector<uint32_t>{2, 0}));
  pool_->ReleaseDevice(dev);
}

TEST_F(EvictorTest, NoLookAheadWhileDisallowed) {
  MakeEvictor(/*lookahead_min_chunks=*/kDeviceChunks);
  EXPECT_TRUE(evictor_->set_lookahead_allowed(false));
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  for (uint32_t c = 0; c < kChunks; ++c) EXPECT_FALSE(table_[c].evicting) << c;
  EXPECT_FALSE(evictor_->set_lookahead_allowed(true));
}

// Note [fenced page-outs]: page-outs whose copies completed are finished,
// the others cancelled; nothing waits.
TEST_F(EvictorTest, SettlingBeforeAFenceFinishesPageOutsWhoseCopiesCompleted) {
  MakeEvictor(/*lookahead_min_chunks=*/kDeviceChunks);
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  ASSERT_TRUE(table_[0].evicting);  // the look-ahead, its copy run by the fake
  evictor_->SettleBeforeFence();
  ExpectInHostTier(0);
  EXPECT_EQ(evictor_->FinishPageOut(), 0u) << "nothing left in flight";
  pool_->ReleaseDevice(dev);
}

TEST_F(EvictorTest, SettlingBeforeAFenceCancelsPageOutsStillCopying) {
  MakeEvictor(/*lookahead_min_chunks=*/kDeviceChunks);
  fake_.Hold(copy_stream_);  // the miss's own batch is waited for (which runs it)
  uint32_t dev = kNoIndex;
  ASSERT_EQ(evictor_->AcquireDevice(&dev, /*may_evict=*/true), CUDA_SUCCESS);
  ExpectInHostTier(2);
  ASSERT_TRUE(table_[0].evicting);  // the look-ahead copy, queued
  const uint64_t host_waits = stats_.host_waits;
  evictor_->SettleBeforeFence();
  EXPECT_EQ(stats_.host_waits, host_waits) << "no wait";
  ExpectOnDevice(0);
  EXPECT_EQ(evictor_->FinishPageOut(), 0u) << "cancelled: nothing moves";
  pool_->ReleaseDevice(dev);
}

}  // namespace
}  // namespace memvirt::shim

// SpillManager over the fake driver and an in-memory spill tier: host chunks
// of a small reservation are demoted and promoted, and where their bytes are
// is checked by checksum, also when a step fails (Note [failed transitions]
// in shim_core.h).
#include "shim/core/spill_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/fake_driver.h"
#include "shim/testing/memory_spill_tier.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim {
namespace {

using testing::MemorySpillTier;
using testing::ScriptedPolicy;

// The owner's side: the pool's free chunks and slots only (none when
// refused), and chunks marked busy.
class TestOwner final : public SpillManager::Owner {
 public:
  bool ChunkIdle(uint32_t chunk) override { return busy.count(chunk) == 0; }
  CUresult AcquireDevice(uint32_t* index) override {
    ++device_requests;
    return refuse_device ? CUDA_ERROR_OUT_OF_MEMORY : pool->AcquireDevice(index);
  }
  CUresult AcquireHost(uint32_t* slot) override {
    ++host_requests;
    return refuse_host ? CUDA_ERROR_OUT_OF_MEMORY : pool->AcquireHost(slot);
  }
  bool DeferLoadWait(uint32_t slot) override {
    if (!defer_loads) return false;
    deferred_loads.push_back(slot);
    return true;
  }

  bool DeferCopyWait(uint64_t copy_seq) override {
    if (!defer_copies) return false;
    deferred_copies.push_back(copy_seq);
    return true;
  }

  uint64_t Fences() override { return fences; }

  PhysicalPool* pool = nullptr;
  uint64_t fences = 0;
  bool defer_loads = false;
  std::vector<uint32_t> deferred_loads;
  bool defer_copies = false;
  std::vector<uint64_t> deferred_copies;
  std::set<uint32_t> busy;
  bool refuse_device = false;
  bool refuse_host = false;
  int device_requests = 0;
  int host_requests = 0;
};

// Staging buffers pinned and unpinned (a driver with cuMemHostRegister).
int g_registered = 0;
CUresult CountRegister(void*, size_t, unsigned int) {
  ++g_registered;
  return CUDA_SUCCESS;
}
CUresult CountUnregister(void*) {
  --g_registered;
  return CUDA_SUCCESS;
}

class SpillManagerTest : public testing::TransitionTest {
 protected:
  static constexpr uint32_t kChunks = 8;
  static constexpr uint32_t kStagingSlots = 2;
  // The stamp of the operation being prepared (chunks are made older).
  static constexpr uint64_t kNow = 100;

  SpillManagerTest() : TransitionTest(kChunks) {}
  void SetUp() override {
    driver_.cuMemHostRegister_v2 = &CountRegister;
    driver_.cuMemHostUnregister = &CountUnregister;
    g_registered = 0;
    ASSERT_EQ(InitParts(/*device_chunks=*/2, /*host_chunks=*/4), CUDA_SUCCESS);
    owner_.pool = pool_.get();
    ASSERT_TRUE(SpillManager::Usable(&driver_, &tier_));
    spill_ = std::make_unique<SpillManager>(
        SpillManager::Parts{parts(), /*tier=*/&tier_, /*owner=*/&owner_});
  }
  void TearDown() override {
    TransitionTest::TearDown();
    spill_.reset();
  }

  static uint64_t Pattern(uint64_t seed) { return PatternChecksum(kChunkBytes, seed); }

  // `c` is kHost, its slot mapped at its address, with the pattern of `seed`.
  void ExpectInHostMemory(uint32_t c, uint64_t seed) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kHost) << c;
    EXPECT_FALSE(e.unmapped) << c;
    ASSERT_TRUE(fake_.IsMapped(Address(c), kChunkBytes)) << c;
    EXPECT_EQ(BytesAt(Address(c)), Pattern(seed)) << c;
    EXPECT_EQ(BytesAt(pool_->mirror(e.phys)), Pattern(seed)) << c;
  }

  // Demotes chunk `c` (alone in the host tier), holding the pattern of `seed`.
  void MakeSpilledChunk(uint32_t c, uint64_t seed) {
    MakeHostChunk(c, seed);
    ASSERT_EQ(spill_->Demote(1, kNow).moved, 1u);
    ASSERT_EQ(table_[c].residence, Residence::kNvme);
  }

  // Chunks 0-2 spilled with the patterns of seed, seed + 1, seed + 2; 0 and
  // 1 promoted with the copy stream held (their stored copies in stored[0],
  // stored[1]): both staging buffers copying.
  void FillBothStagingBuffers(uint64_t seed, uint64_t* stored) {
    static_assert(kStagingSlots == 2);
    for (uint32_t c = 0; c < 3; ++c) MakeSpilledChunk(c, seed + c);
    fake_.Hold(copy_stream_);  // the staging copies stay queued
    EXPECT_EQ(spill_->Promote(0, &stored[0]), CUDA_SUCCESS);
    EXPECT_EQ(spill_->Promote(1, &stored[1]), CUDA_SUCCESS);
  }

  // `c` is kNvme, nothing mapped at its address, and the tier holds one
  // copy: the pattern of `seed`.
  void ExpectStored(uint32_t c, uint64_t seed) {
    EXPECT_EQ(table_[c].residence, Residence::kNvme) << c;
    EXPECT_EQ(table_[c].phys, kNoIndex) << c;
    EXPECT_FALSE(fake_.IsMapped(Address(c), kChunkBytes)) << c;
    EXPECT_EQ(tier_.StoredChecksums(), std::vector<uint64_t>{Pattern(seed)}) << c;
  }

  MemorySpillTier tier_{kStagingSlots};
  TestOwner owner_;
  std::unique_ptr<SpillManager> spill_;
};

TEST_F(SpillManagerTest, StagingBuffersArePinnedForTheManagersLifetime) {
  EXPECT_EQ(spill_->staging_slots(), kStagingSlots);
  EXPECT_EQ(g_registered, static_cast<int>(kStagingSlots));
  spill_.reset();
  EXPECT_EQ(g_registered, 0);
}

TEST_F(SpillManagerTest, ATierIsUsableOnlyWithStagingBuffersAndAsyncHostCopies) {
  EXPECT_FALSE(SpillManager::Usable(&driver_, nullptr));
  MemorySpillTier none(0);
  EXPECT_FALSE(SpillManager::Usable(&driver_, &none));
  Driver sync_only = driver_;
  sync_only.cuMemcpyDtoHAsync_v2 = nullptr;
  EXPECT_FALSE(SpillManager::Usable(&sync_only, &tier_));
}

TEST_F(SpillManagerTest, DemotionStoresTheBytesAndFreesTheSlot) {
  MakeHostChunk(0, 1, /*stamp=*/1);
  MakeHostChunk(1, 2, /*stamp=*/2);
  ASSERT_EQ(pool_->host_in_use(), 2u);

  const SpillManager::Demoted demoted = spill_->Demote(2, kNow);
  EXPECT_EQ(demoted.moved, 2u);
  EXPECT_EQ(table_.unmapped_count(), 0u);
  for (uint32_t c : {0u, 1u}) {
    const ChunkEntry& e = table_[c];
    EXPECT_EQ(e.residence, Residence::kNvme);
    EXPECT_EQ(e.phys, kNoIndex);
    EXPECT_EQ(e.fill_seq, 0u);
    EXPECT_FALSE(fake_.IsMapped(Address(c), kChunkBytes));
  }
  EXPECT_EQ(pool_->host_in_use(), 0u);
  std::vector<uint64_t> expected{Pattern(1), Pattern(2)};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(tier_.StoredChecksums(), expected);
  EXPECT_EQ(stats_.demotions, 2u);
  EXPECT_EQ(spill_->spilled_chunks(), 2u);
  EXPECT_EQ(stats_.host_waits, 1u);  // one wait for the batch's copies
  EXPECT_EQ(stats_.demotion_scans, 1u);
  EXPECT_EQ(stats_.spill_failures, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(SpillManagerTest, DemotionTakesTheLeastRecentlyUsedFirstAndLeavesTheOthers) {
  MakeHostChunk(0, 1, /*stamp=*/5);
  MakeHostChunk(1, 2, /*stamp=*/3);
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 1u);
  EXPECT_EQ(table_[1].residence, Residence::kNvme);
  ExpectInHostMemory(0, 1);
  EXPECT_EQ(tier_.StoredChecksums(), std::vector<uint64_t>{Pattern(2)});
}

// The queue a demotion leaves is rebuilt when it runs dry; a chunk taken
// from the old queue is still in host memory then, and is moved once.
TEST_F(SpillManagerTest, AChunkIsStagedOnceWhenTheQueueIsRebuiltDuringABatch) {
  MakeHostChunk(0, 1, /*stamp=*/3);
  MakeHostChunk(1, 2, /*stamp=*/5);
  ASSERT_EQ(spill_->Demote(1, kNow).moved, 1u);  // chunk 0; chunk 1 stays queued
  EXPECT_EQ(spill_->Demote(2, kNow).moved, 1u);  // chunk 1, then the rebuilt queue
  EXPECT_EQ(table_[1].residence, Residence::kNvme);
  EXPECT_EQ(tier_.stores, 2) << "one store a chunk";
  EXPECT_EQ(tier_.stored(), 2u);
  EXPECT_EQ(spill_->spilled_chunks(), 2u);
  EXPECT_EQ(stats_.spill_failures, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(SpillManagerTest, ChunksInUseOrNotToBeDemotedStayInHostMemory) {
  MakeHostChunk(0, 1, /*stamp=*/kNow);  // the operation being prepared touches it
  MakeHostChunk(1, 2);
  table_[1].hidden_target = true;  // a kernel may reach it unnamed
  MakeHostChunk(2, 3);
  owner_.busy.insert(2);  // its last use has not completed
  MakeHostChunk(3, 4);
  table_[3].live_data = false;  // freed: nothing to keep

  const SpillManager::Demoted demoted = spill_->Demote(4, kNow);
  EXPECT_EQ(demoted.moved, 0u);
  for (uint32_t c : {0u, 1u, 2u}) ExpectInHostMemory(c, c + 1);
  EXPECT_EQ(table_[3].residence, Residence::kHost);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(stats_.host_waits, 0u);  // nothing copied: no wait
  EXPECT_EQ(stats_.demotions, 0u);

  owner_.busy.clear();  // idle now
  EXPECT_EQ(spill_->Demote(4, kNow).moved, 1u);
  EXPECT_EQ(table_[2].residence, Residence::kNvme);
}

TEST_F(SpillManagerTest, DemotingAnUnmappedChunkClearsItsMark) {
  MakeHostChunk(0, 1);
  ASSERT_EQ(pool_->UnmapAt(Address(0)), CUDA_SUCCESS);
  table_.SetUnmapped(0, true);  // its bytes are in its slot, nothing mapped
  const SpillManager::Demoted demoted = spill_->Demote(1, kNow);
  EXPECT_EQ(demoted.moved, 1u);
  EXPECT_EQ(table_.unmapped_count(), 0u);  // the mark went with the slot
  EXPECT_FALSE(table_[0].unmapped);
  ExpectStored(0, 1);
  EXPECT_EQ(pool_->host_in_use(), 0u);
}

// Note [demotion outside the lock]: the owner waits for the staging copies
// and stores without its lock; a chunk used meanwhile keeps its host slot
// (its bytes may have changed since the copy), and its stored copy goes.
TEST_F(SpillManagerTest, AChunkUsedWhileItsDemotionStoresKeepsItsHostSlot) {
  MakeHostChunk(0, 1, /*stamp=*/1);
  MakeHostChunk(1, 2, /*stamp=*/2);
  SpillManager::DemotionBatch batch;
  spill_->StartDemotion(2, kNow, &batch);
  ASSERT_EQ(batch.moves.size(), 2u);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, batch.copy_seq), CUDA_SUCCESS);
  // Another operation writes chunk 1 before the stores.
  table_[1].stamp = kNow + 1;
  FillPattern(reinterpret_cast<void*>(Address(1)), kChunkBytes, 22);
  SpillManager::StoreDemotion(&tier_, &batch);
  EXPECT_EQ(tier_.stored(), 2u);
  const SpillManager::Demoted demoted = spill_->FinishDemotion(batch);
  EXPECT_EQ(demoted.moved, 1u);
  ExpectStored(0, 1);
  ExpectInHostMemory(1, 22);
  EXPECT_EQ(pool_->host_in_use(), 1u);
  EXPECT_EQ(stats_.demotions_superseded, 1u);
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
  EXPECT_EQ(stats_.spill_failures, 0u);
}

// A launch that may write memory it does not name (a fence) ran while the
// batch was stored: no chunk of it is known unchanged.
TEST_F(SpillManagerTest, AFenceDuringTheStoresKeepsTheWholeBatch) {
  MakeHostChunk(0, 1);
  MakeHostChunk(1, 2);
  SpillManager::DemotionBatch batch;
  spill_->StartDemotion(2, kNow, &batch);
  ASSERT_EQ(batch.moves.size(), 2u);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, batch.copy_seq), CUDA_SUCCESS);
  ++owner_.fences;
  SpillManager::StoreDemotion(&tier_, &batch);
  EXPECT_EQ(spill_->FinishDemotion(batch).moved, 0u);
  ExpectInHostMemory(0, 1);
  ExpectInHostMemory(1, 2);
  EXPECT_EQ(tier_.stored(), 0u) << "the stored copies are discarded";
  EXPECT_EQ(stats_.demotions_superseded, 2u);
  // Still candidates: the next demotion moves them.
  EXPECT_EQ(spill_->Demote(2, kNow).moved, 2u);
}

// While one batch is stored, its chunks and staging buffers are not taken by
// another demotion; a batch given up before its stores keeps every chunk.
TEST_F(SpillManagerTest, ABatchBeingStoredHoldsItsChunksAndStagingBuffers) {
  static_assert(kStagingSlots == 2);
  MakeHostChunk(0, 1, /*stamp=*/1);
  MakeHostChunk(1, 2, /*stamp=*/2);
  MakeHostChunk(2, 3, /*stamp=*/3);
  SpillManager::DemotionBatch first;
  spill_->StartDemotion(1, kNow, &first);
  ASSERT_EQ(first.moves.size(), 1u);
  EXPECT_EQ(first.moves[0].chunk, 0u);
  SpillManager::DemotionBatch second;
  spill_->StartDemotion(4, kNow, &second);
  ASSERT_EQ(second.moves.size(), 1u) << "one staging buffer is left";
  EXPECT_EQ(second.moves[0].chunk, 1u);
  EXPECT_NE(second.moves[0].slot, first.moves[0].slot);
  EXPECT_EQ(spill_->FinishDemotion(second).moved, 0u);  // given up: nothing stored
  ExpectInHostMemory(1, 2);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, first.copy_seq), CUDA_SUCCESS);
  SpillManager::StoreDemotion(&tier_, &first);
  EXPECT_EQ(spill_->FinishDemotion(first).moved, 1u);
  ExpectStored(0, 1);
  EXPECT_EQ(spill_->Demote(4, kNow).moved, 2u) << "both staging buffers are free again";
  EXPECT_EQ(stats_.demotions_superseded, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(SpillManagerTest, PromotionBringsTheBytesBackByteExact) {
  MakeSpilledChunk(0, 7);
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kDevice);
  EXPECT_NE(e.fill_seq, 0u);  // filled on the copy stream
  ASSERT_EQ(tracker_->WaitFor(copy_index_, e.fill_seq), CUDA_SUCCESS);
  ASSERT_TRUE(fake_.IsMapped(Address(0), kChunkBytes));
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
  EXPECT_EQ(pool_->device_in_use(), 1u);
  EXPECT_EQ(policy_.resident, std::vector<uint32_t>{0});
  EXPECT_EQ(stats_.promotions, 1u);
  EXPECT_EQ(stats_.promotion_reads, 1u);
  EXPECT_EQ(stats_.page_ins, 1u);
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
  // The stored copy stays until the owner has ordered the fill.
  EXPECT_EQ(tier_.StoredChecksum(stored), Pattern(7));
  spill_->Discard(stored);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [waits outside the lock] in shim_core.h: a load still running is
// left to the owner to wait for; the repeat uses it without reading again.
TEST_F(SpillManagerTest, PromotionLeavesARunningLoadToTheOwnerToWaitFor) {
  MakeSpilledChunk(0, 7);
  tier_.slow_loads = true;
  owner_.defer_loads = true;
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(owner_.deferred_loads.size(), 1u);
  ExpectStored(0, 7);
  EXPECT_EQ(pool_->device_in_use(), 0u) << "the target is released";
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
  EXPECT_EQ(stats_.promotions, 0u);

  tier_.WaitLoad(owner_.deferred_loads[0]);  // as the owner does without its lock
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  EXPECT_EQ(owner_.deferred_loads.size(), 1u) << "a finished load is not waited for again";
  EXPECT_EQ(tier_.started_loads, 1) << "the repeat reads nothing again";
  EXPECT_EQ(stats_.promotion_reads, 1u);
  ASSERT_EQ(table_[0].residence, Residence::kDevice);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

// An owner that waits here: the promotion waits for the load itself.
TEST_F(SpillManagerTest, PromotionWaitsForARunningLoadWhenTheOwnerDoesNotDefer) {
  MakeSpilledChunk(0, 7);
  tier_.slow_loads = true;
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  EXPECT_EQ(tier_.wait_loads, 0);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

// An owner that waits here: the promotion waits for the oldest copy itself.
TEST_F(SpillManagerTest, PromotionWaitsForAStagingCopyWhenTheOwnerDoesNotDefer) {
  uint64_t stored[3] = {};
  FillBothStagingBuffers(30, stored);
  ASSERT_FALSE(HasFailure());
  const uint64_t waits = stats_.host_waits;
  ASSERT_EQ(spill_->Promote(2, &stored[2]), CUDA_SUCCESS);
  EXPECT_EQ(stats_.host_waits, waits + 1);
  EXPECT_TRUE(tracker_->IsComplete(copy_index_, table_[0].fill_seq)) << "it waited for the oldest";
  fake_.Release(copy_stream_);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[2].fill_seq), CUDA_SUCCESS);
  const ChunkEntry& e = table_[2];
  const CUdeviceptr bytes = e.residence == Residence::kHost ? pool_->mirror(e.phys) : Address(2);
  EXPECT_EQ(BytesAt(bytes), Pattern(32));
  for (uint64_t s : stored) spill_->Discard(s);
}

// An owner that waits without its lock: a promotion that finds both staging
// buffers copying leaves the wait for the oldest copy to it and fails; the
// repeat takes that buffer.
TEST_F(SpillManagerTest, PromotionLeavesTheWaitForAStagingCopyToTheOwner) {
  uint64_t stored[3] = {};
  FillBothStagingBuffers(30, stored);
  ASSERT_FALSE(HasFailure());
  owner_.defer_copies = true;
  const uint64_t waits = stats_.host_waits;
  const uint32_t host_in_use = pool_->host_in_use();
  ASSERT_EQ(spill_->Promote(2, &stored[2]), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(owner_.deferred_copies, std::vector<uint64_t>{table_[0].fill_seq}) << "the oldest";
  EXPECT_EQ(stats_.host_waits, waits) << "nothing waited for here";
  EXPECT_EQ(table_[2].residence, Residence::kNvme);
  EXPECT_EQ(pool_->host_in_use(), host_in_use) << "the target is released";
  fake_.Release(copy_stream_);  // as the owner waits, without its lock
  ASSERT_EQ(tracker_->WaitFor(copy_index_, owner_.deferred_copies[0]), CUDA_SUCCESS);
  ASSERT_EQ(spill_->Promote(2, &stored[2]), CUDA_SUCCESS);
  EXPECT_EQ(owner_.deferred_copies.size(), 1u) << "a completed copy is not waited for again";
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[2].fill_seq), CUDA_SUCCESS);
  const ChunkEntry& e = table_[2];
  const CUdeviceptr bytes = e.residence == Residence::kHost ? pool_->mirror(e.phys) : Address(2);
  EXPECT_EQ(BytesAt(bytes), Pattern(32));
  for (uint64_t s : stored) spill_->Discard(s);
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a staging buffer that a load ahead holds: the promotion leaves
// the wait for that load to the owner (it is given up after it), and the
// repeat takes the buffer; the chunk loaded ahead stays stored.
TEST_F(SpillManagerTest, PromotionLeavesTheWaitForALoadAheadItGivesUpToTheOwner) {
  static_assert(kStagingSlots == 2);
  MakeSpilledChunk(0, 7);
  MakeSpilledChunk(1, 8);
  tier_.slow_loads = true;
  policy_.upcoming = {0};
  spill_->Prefetch();  // one staging buffer: chunk 0's load, still running
  ASSERT_EQ(tier_.started_loads, 1);
  MakeHostChunk(2, 9);
  SpillManager::DemotionBatch batch;
  spill_->StartDemotion(1, kNow, &batch);  // the other: chunk 2's demotion, being stored
  ASSERT_EQ(batch.moves.size(), 1u);
  owner_.defer_loads = true;
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(1, &stored), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(owner_.deferred_loads.size(), 1u);
  EXPECT_EQ(tier_.wait_loads, 0) << "nothing waited for here";
  EXPECT_EQ(table_[1].residence, Residence::kNvme);
  EXPECT_EQ(pool_->device_in_use(), 0u) << "the target is released";
  tier_.WaitLoad(owner_.deferred_loads[0]);  // as the owner does without its lock
  tier_.slow_loads = false;                  // chunk 1's own load completes at once
  ASSERT_EQ(spill_->Promote(1, &stored), CUDA_SUCCESS);
  EXPECT_EQ(owner_.deferred_loads.size(), 1u) << "a finished load is not waited for again";
  EXPECT_EQ(tier_.started_loads, 2) << "chunk 1's own load, once";
  EXPECT_EQ(table_[0].residence, Residence::kNvme) << "its load ahead was given up";
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[1].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(1)), Pattern(8));
  spill_->Discard(stored);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, batch.copy_seq), CUDA_SUCCESS);
  SpillManager::StoreDemotion(&tier_, &batch);
  EXPECT_EQ(spill_->FinishDemotion(batch).moved, 1u);
  uint64_t stored0 = 0;
  ASSERT_EQ(spill_->Promote(0, &stored0), CUDA_SUCCESS);  // read again on demand
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a demotion started by an operation that waits without its lock:
// it starts no batch and leaves the wait for the oldest copy to the owner.
TEST_F(SpillManagerTest, ADemotionLeavesTheWaitForAStagingCopyToTheOwner) {
  uint64_t stored[2] = {};
  FillBothStagingBuffers(40, stored);
  ASSERT_FALSE(HasFailure());
  MakeHostChunk(3, 43);
  owner_.defer_copies = true;
  SpillManager::DemotionBatch batch;
  spill_->StartDemotion(1, kNow, &batch, /*may_defer=*/true);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(owner_.deferred_copies, std::vector<uint64_t>{table_[0].fill_seq}) << "the oldest";
  ExpectInHostMemory(3, 43);
  fake_.Release(copy_stream_);  // as the owner waits, without its lock
  ASSERT_EQ(tracker_->WaitFor(copy_index_, owner_.deferred_copies[0]), CUDA_SUCCESS);
  spill_->StartDemotion(1, kNow, &batch, /*may_defer=*/true);
  ASSERT_EQ(batch.moves.size(), 1u) << "the repeat takes the buffer";
  EXPECT_EQ(batch.moves[0].chunk, 3u);
  EXPECT_EQ(owner_.deferred_copies.size(), 1u);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, batch.copy_seq), CUDA_SUCCESS);
  SpillManager::StoreDemotion(&tier_, &batch);
  EXPECT_EQ(spill_->FinishDemotion(batch).moved, 1u);
  EXPECT_EQ(table_[3].residence, Residence::kNvme);
  for (uint64_t s : stored) spill_->Discard(s);
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(SpillManagerTest, PromotionFallsBackToAHostSlotWhenTheDeviceIsFull) {
  MakeSpilledChunk(0, 7);
  owner_.refuse_device = true;
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  EXPECT_EQ(owner_.host_requests, 1);
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kHost);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, e.fill_seq), CUDA_SUCCESS);
  ExpectInHostMemory(0, 7);
  EXPECT_EQ(stats_.host_fallbacks, 1u);
  EXPECT_EQ(stats_.page_ins, 0u);
  EXPECT_TRUE(policy_.resident.empty());
}

TEST_F(SpillManagerTest, PromotionWithoutATargetFailsWithOutOfMemory) {
  MakeSpilledChunk(0, 7);
  owner_.refuse_device = owner_.refuse_host = true;
  uint64_t stored = 0;
  EXPECT_EQ(spill_->Promote(0, &stored), CUDA_ERROR_OUT_OF_MEMORY);
  ExpectStored(0, 7);
  EXPECT_EQ(tier_.started_loads, 0);
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
}

TEST_F(SpillManagerTest, RefusedStoreKeepsTheChunkInHostMemory) {
  MakeHostChunk(0, 1);
  tier_.no_space = true;
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 0u);
  ExpectInHostMemory(0, 1);
  EXPECT_EQ(stats_.spill_failures, 1u);
  tier_.no_space = false;
  tier_.fail_stores = true;
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 0u);
  ExpectInHostMemory(0, 1);
  EXPECT_EQ(stats_.spill_failures, 2u);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(pool_->host_in_use(), 1u);
  EXPECT_EQ(stats_.demotions, 0u);
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
}

TEST_F(SpillManagerTest, FailedStagingCopyKeepsTheChunkInHostMemory) {
  MakeHostChunk(0, 1);
  faults_.FailHostCopy(1);
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 0u);
  ExpectInHostMemory(0, 1);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(stats_.host_waits, 0u);
  // Still a candidate: the next demotion takes it.
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 1u);
  ExpectStored(0, 1);
}

TEST_F(SpillManagerTest, FailedWaitForTheStagingCopiesKeepsTheBatchInHostMemory) {
  MakeHostChunk(0, 1);
  MakeHostChunk(1, 2);
  faults_.FailEventRecord(1000);  // the wait cannot be ordered
  EXPECT_EQ(spill_->Demote(2, kNow).moved, 0u);
  faults_.ClearFaults();
  ExpectInHostMemory(0, 1);
  ExpectInHostMemory(1, 2);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(pool_->host_in_use(), 2u);
}

TEST_F(SpillManagerTest, FailedUnmapKeepsTheChunkInHostMemoryAndDiscardsTheStoredCopy) {
  MakeHostChunk(0, 1);
  faults_.FailMemUnmap(1);
  EXPECT_EQ(spill_->Demote(1, kNow).moved, 0u);
  ExpectInHostMemory(0, 1);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
}

TEST_F(SpillManagerTest, FailedLoadKeepsTheStoredCopyAndFailsWithAnUncorrectableError) {
  MakeSpilledChunk(0, 7);
  tier_.fail_loads = true;
  uint64_t stored = 0;
  EXPECT_EQ(spill_->Promote(0, &stored), CUDA_ERROR_ECC_UNCORRECTABLE);
  ExpectStored(0, 7);
  EXPECT_EQ(pool_->device_in_use(), 0u);  // the target went back
  EXPECT_EQ(stats_.spill_failures, 1u);
  EXPECT_EQ(stats_.promotions, 0u);
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
  tier_.fail_loads = false;  // it may be retried
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

TEST_F(SpillManagerTest, FailedCopyFromStagingKeepsTheStoredCopy) {
  MakeSpilledChunk(0, 7);
  faults_.FailHostCopy(1);
  uint64_t stored = 0;
  EXPECT_NE(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ExpectStored(0, 7);
  EXPECT_EQ(pool_->device_in_use(), 0u);
  EXPECT_EQ(stats_.promotions, 0u);
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

TEST_F(SpillManagerTest, FailedMapKeepsTheStoredCopy) {
  MakeSpilledChunk(0, 7);
  faults_.FailMemMap(1);
  uint64_t stored = 0;
  EXPECT_NE(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ExpectStored(0, 7);
  EXPECT_EQ(pool_->device_in_use(), 0u);
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

TEST_F(SpillManagerTest, RestoredPromotionIsStoredAgain) {
  MakeSpilledChunk(0, 7);
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ASSERT_EQ(tracker_->WaitForAll(), CUDA_SUCCESS);
  // The owner could not order the fill: it releases the target, the chunk
  // goes back to its stored copy.
  ChunkEntry& e = table_[0];
  ASSERT_EQ(pool_->UnmapAt(Address(0)), CUDA_SUCCESS);
  pool_->ReleaseDevice(e.phys);
  e.fill_seq = 0;
  spill_->Restore(0, stored);
  ExpectStored(0, 7);
  EXPECT_EQ(spill_->spilled_chunks(), 1u);
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

TEST_F(SpillManagerTest, DropDiscardsTheStoredCopy) {
  MakeSpilledChunk(0, 7);
  spill_->Drop(0);
  EXPECT_EQ(table_[0].residence, Residence::kUnbacked);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
}

TEST_F(SpillManagerTest, PromotionUsesALoadStartedAhead) {
  MakeSpilledChunk(0, 7);
  policy_.upcoming = {0};
  spill_->Prefetch();
  EXPECT_EQ(stats_.spill_prefetches, 1u);
  EXPECT_EQ(tier_.started_loads, 1);
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);
  EXPECT_EQ(tier_.started_loads, 1);  // no second read
  EXPECT_EQ(stats_.promotion_reads, 0u);
  EXPECT_EQ(stats_.promotions, 1u);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

TEST_F(SpillManagerTest, FinishedLoadsAreInstalledIntoFreeHostSlots) {
  MakeSpilledChunk(0, 7);
  policy_.upcoming = {0};
  spill_->Prefetch();  // starts the load
  ASSERT_EQ(tier_.started_loads, 1);
  spill_->Prefetch();  // installs it
  const ChunkEntry& e = table_[0];
  EXPECT_EQ(e.residence, Residence::kHost);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, e.fill_seq), CUDA_SUCCESS);
  ExpectInHostMemory(0, 7);
  EXPECT_EQ(tier_.stored(), 0u);  // the host slot holds it now
  EXPECT_EQ(spill_->spilled_chunks(), 0u);
  EXPECT_EQ(stats_.promotions, 0u);  // no use yet
}

TEST_F(SpillManagerTest, FailedLoadAheadIsDroppedAndTheChunkStaysStored) {
  MakeSpilledChunk(0, 7);
  policy_.upcoming = {0};
  spill_->Prefetch();
  tier_.fail_loads = true;
  policy_.upcoming.clear();  // nothing more to load ahead
  spill_->Prefetch();        // collects the failure
  EXPECT_EQ(stats_.spill_failures, 1u);
  ExpectStored(0, 7);
  tier_.fail_loads = false;
  uint64_t stored = 0;
  ASSERT_EQ(spill_->Promote(0, &stored), CUDA_SUCCESS);  // the demand path reads again
  EXPECT_EQ(stats_.promotion_reads, 1u);
  ASSERT_EQ(tracker_->WaitFor(copy_index_, table_[0].fill_seq), CUDA_SUCCESS);
  EXPECT_EQ(BytesAt(Address(0)), Pattern(7));
}

}  // namespace
}  // namespace memvirt::shim

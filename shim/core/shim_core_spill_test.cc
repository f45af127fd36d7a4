// Note [spill tier]: demotion of host chunks to a spill tier and their
// promotion, over an in-memory tier with failure switches.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "shim/core/shim_core.h"
#include "shim/core/shim_core_test_fixture.h"
#include "shim/testing/fake_driver.h"
#include "shim/testing/memory_spill_tier.h"

namespace memvirt::shim {
namespace {

using testing::MemorySpillTier;

class SpillControlPlane final : public ControlPlane {
 public:
  explicit SpillControlPlane(SpillTier* tier) : tier_(tier) {}
  uint64_t InitialDeviceBudget(const DeviceIdentity&, uint64_t local) override { return local; }
  uint64_t InitialHostBudget(uint64_t local) override { return local; }
  void OnBudgetChange(std::function<void(uint64_t)>) override {}
  void SetUsageSource(std::function<UsageReport()>) override {}
  SpillTier* spill_tier() override { return tier_; }

 private:
  SpillTier* tier_;
};

// 8 MiB of device, 8 MiB of host tier, 64 MiB of spill tier.
class ShimCoreSpillTest : public ShimCoreTest {
 protected:
  void SetUp() override { Make(&fake_.driver(), 8 * kMiB, 8 * kMiB, "lru", &plane_); }
  // The core calls its control plane until destroyed; plane_ and tier_ are
  // destroyed before the base class's core_.
  void TearDown() override { core_.reset(); }

  // Writes `count` 2 MiB blocks with distinct patterns (seeds from `seed`).
  std::vector<CUdeviceptr> WriteBlocks(CUstream s, int count, uint64_t seed = 500) {
    std::vector<CUdeviceptr> blocks(count);
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(core_->Alloc(&blocks[i], 2 * kMiB), CUDA_SUCCESS);
      EXPECT_EQ(Write(s, blocks[i], 2 * kMiB, seed + i), CUDA_SUCCESS) << "block " << i;
    }
    return blocks;
  }

  // Reads blocks [0, count) one by one and checks each against its pattern.
  void ExpectBlocks(CUstream s, const std::vector<CUdeviceptr>& blocks, int count,
                    uint64_t seed = 500) {
    for (int i = 0; i < count; ++i) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks[i], 2 * kMiB, &sum), CUDA_SUCCESS) << "block " << i;
      ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, seed + i)) << "block " << i;
    }
  }

  MemorySpillTier tier_{4, 64 * kMiB};
  SpillControlPlane plane_{&tier_};
};

TEST_F(ShimCoreSpillTest, CapacityIncludesTheSpillTier) {
  size_t free = 0, total = 0;
  ASSERT_EQ(core_->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 80 * kMiB);
}

TEST_F(ShimCoreSpillTest, DataSurvivesDemotionAndPromotion) {
  CUstream s = fake_.CreateStream();
  // 3x device + host: two thirds of the data must go through the spill tier.
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 24);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  CoreStats mid = core_->stats();
  EXPECT_GE(mid.spilled_chunks, 15u);
  EXPECT_EQ(tier_.stored(), mid.spilled_chunks);
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kNvme);
  for (int round = 0; round < 2; ++round) ExpectBlocks(s, blocks, 24);
  const CoreStats end = core_->stats();
  EXPECT_GE(end.promotions, 24u);
  // A promotion that did not read the tier used a load started ahead (lru's
  // successor prefetch, Note [spill tier]).
  EXPECT_LE(end.promotions - end.promotion_reads, end.spill_prefetches);
  EXPECT_EQ(fake_.faults(), 0u);
  const UsageReport usage = core_->TakeUsage();
  EXPECT_EQ(usage.nvme_resident_bytes, uint64_t{end.spilled_chunks} * kChunkBytes);
  EXPECT_EQ(usage.nvme_write_bytes, end.demotions * kChunkBytes);
  EXPECT_GT(usage.nvme_read_bytes, 0u);
}

// Calls the core from another thread while the test's thread is inside a
// tier call (a hook of the tier): Served() is true if the call returned
// within 20 s, which it cannot while the test's thread holds the core's lock.
class CallFromAnotherThread {
 public:
  explicit CallFromAnotherThread(ShimCore* core) : core_(core) {}
  ~CallFromAnotherThread() {
    if (thread_.joinable()) thread_.join();
  }
  std::function<void()> Hook() {
    return [this] {
      thread_ = std::thread([this] { done_.set_value(core_->GetInfo(&free_, &total_)); });
      served_ = result_.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    };
  }
  bool Ran() const { return thread_.joinable(); }
  // The call was served while the hook waited, and succeeded.
  bool Served() {
    if (thread_.joinable()) thread_.join();
    return served_ && result_.get() == CUDA_SUCCESS && total_ == 80 * kMiB;
  }

 private:
  ShimCore* const core_;
  std::promise<CUresult> done_;
  std::future<CUresult> result_ = done_.get_future();
  std::thread thread_;
  bool served_ = false;
  size_t free_ = 0, total_ = 0;
};

// Note [waits outside the lock]: a promotion waits for its load from the
// spill tier without the core lock, so another thread can use the core
// meanwhile (with the wait under the lock, it waits 20 s for the lock).
TEST_F(ShimCoreSpillTest, SpillLoadWaitLetsOtherThreadsUseTheCore) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 24);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kNvme);
  tier_.slow_loads = true;
  CallFromAnotherThread other(core_.get());
  tier_.during_wait = other.Hook();
  const uint64_t host_waits = core_->stats().host_waits;
  uint64_t sum = 0;
  const CUresult r = Read(s, blocks[0], 2 * kMiB, &sum);
  tier_.during_wait = nullptr;
  ASSERT_TRUE(other.Ran()) << "the read did not wait for a load";
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(other.Served());
  EXPECT_GT(core_->stats().host_waits, host_waits) << "the wait was made outside the lock";
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 500));
  ExpectBlocks(s, blocks, 24);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [exports in flight] (shim_core_app_vmm.cc): an export of a handle whose
// bytes went to the spill tier promotes them with the load waited for
// without the core lock, and exports the bytes.
TEST_F(ShimCoreSpillTest, ExportOfASpilledHandleLoadsItWithoutTheCoreLock) {
  CUstream s = fake_.CreateStream();
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_NO_FATAL_FAILURE(MapAppHandle(4 * kMiB, &base, &handle));
  ASSERT_EQ(Write(s, base, 4 * kMiB, 77), CUDA_SUCCESS);
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 20);  // the handle goes to the spill tier
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(base), Residence::kNvme);
  tier_.slow_loads = true;
  CallFromAnotherThread other(core_.get());
  tier_.during_wait = other.Hook();
  int fd = -1;
  const CUresult r = core_->AppExport(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  tier_.during_wait = nullptr;
  tier_.slow_loads = false;
  ASSERT_TRUE(other.Ran()) << "the export did not wait for a load";
  ASSERT_EQ(r, CUDA_SUCCESS);
  EXPECT_TRUE(other.Served()) << "the load was waited for under the core lock";
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ExportedChecksum(fd, 4 * kMiB), PatternChecksum(4 * kMiB, 77));
  EXPECT_TRUE(core_->IsForeign(base, 4 * kMiB));
  ExpectBlocks(s, blocks, 20);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [demotion outside the lock] (spill_manager.h): a write that needs a
// host slot demotes host chunks, and stores them without the core lock.
TEST_F(ShimCoreSpillTest, DemotionStoresLetOtherThreadsUseTheCore) {
  CUstream s = fake_.CreateStream();
  CallFromAnotherThread other(core_.get());
  tier_.during_store = other.Hook();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 24);
  tier_.during_store = nullptr;
  ASSERT_TRUE(other.Ran()) << "no write demoted";
  EXPECT_TRUE(other.Served());
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_GE(core_->stats().demotions, 15u);
  ExpectBlocks(s, blocks, 24);
  EXPECT_EQ(fake_.faults(), 0u);
}

// The same for a demotion the control plane asks for.
TEST_F(ShimCoreSpillTest, DemotionAskedByTheControlPlaneStoresWithoutTheCoreLock) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 24);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const uint64_t before = core_->stats().demotions;
  CallFromAnotherThread other(core_.get());
  tier_.during_store = other.Hook();
  EXPECT_EQ(core_->DemoteHostBytes(4 * kMiB), 4 * kMiB);
  tier_.during_store = nullptr;
  ASSERT_TRUE(other.Ran()) << "nothing was demoted";
  EXPECT_TRUE(other.Served());
  EXPECT_EQ(core_->stats().demotions, before + 2);
  ExpectBlocks(s, blocks, 24);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [waits outside the lock] (shim_core.h): a demotion the control plane
// asks for while every staging buffer still copies a promoted chunk to the
// device waits for the oldest copy without the core lock, then demotes.
TEST_F(ShimCoreSpillTest, ControlPlaneDemotionWaitsForAStagingCopyWithoutTheCoreLock) {
  Make(HookEventSync(fake_.driver()), 8 * kMiB, 8 * kMiB, "lru", &plane_);
  const CUstream copy = fake_.created_streams().back();  // the core's copy stream
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 24);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  // Room on the device for four promotions without an eviction.
  std::vector<int> kept, spilled;
  for (int i = 0; i < 24; ++i) {
    const Residence r = core_->TEST_ResidenceOf(blocks[i]);
    if (r == Residence::kDevice) {
      ASSERT_EQ(core_->Free(blocks[i]), CUDA_SUCCESS);
      continue;
    }
    kept.push_back(i);
    if (r == Residence::kNvme) spilled.push_back(i);
  }
  ASSERT_GE(spilled.size(), 4u);
  // Four promotions whose copies from their staging buffers stay queued.
  fake_.Hold(copy);
  uint64_t sums[4] = {};
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(Read(s, blocks[spilled[k]], 2 * kMiB, &sums[k]), CUDA_SUCCESS) << k;
  }
  const uint64_t demotions = core_->stats().demotions;
  CallFromAnotherThread other(core_.get());
  during_event_sync = other.Hook();
  EXPECT_EQ(core_->DemoteHostBytes(2 * kMiB), 2 * kMiB);
  during_event_sync = nullptr;
  fake_.Release(copy);
  ASSERT_TRUE(other.Ran()) << "the demotion did not wait for a staging copy";
  EXPECT_TRUE(other.Served()) << "the staging copy was waited for under the core lock";
  EXPECT_EQ(core_->stats().demotions, demotions + 1);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(sums[k], PatternChecksum(2 * kMiB, 500 + spilled[k])) << "block " << spilled[k];
  }
  std::vector<std::pair<CUdeviceptr, uint64_t>> kept_blocks;  // (block, seed)
  for (int i : kept) kept_blocks.push_back({blocks[i], 500 + i});
  ExpectPatterns(s, 2 * kMiB, kept_blocks);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [demotion outside the lock]: threads writing and reading their own
// blocks, 2.5x device and host memory together, while each other's
// demotions store (slowly) without the core lock; a chunk written during its
// store must keep its new bytes. Every read is checked by checksum.
TEST_F(ShimCoreSpillTest, ConcurrentUsersKeepEveryByteWhileChunksAreDemoted) {
  constexpr int kThreads = 4, kBlocksEach = 5, kRounds = 6;
  tier_.store_delay = std::chrono::microseconds(300);
  (void)Function(1);  // Write's and Read's kernel, made before the threads launch it
  std::vector<CUstream> streams;
  std::vector<std::vector<CUdeviceptr>> blocks(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    streams.push_back(fake_.CreateStream());
    for (int i = 0; i < kBlocksEach; ++i) {
      CUdeviceptr p = 0;
      ASSERT_EQ(core_->Alloc(&p, 2 * kMiB), CUDA_SUCCESS);
      blocks[t].push_back(p);
    }
  }
  auto seed = [](int t, int round, int i) { return uint64_t(1000 * t + 100 * round + i); };
  std::atomic<int> failed_calls{0}, mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kBlocksEach; ++i) {
          if (Write(streams[t], blocks[t][i], 2 * kMiB, seed(t, round, i)) != CUDA_SUCCESS) {
            ++failed_calls;
          }
        }
        for (int i = 0; i < kBlocksEach; ++i) {
          uint64_t sum = 0;  // the fake runs the read at once
          if (Read(streams[t], blocks[t][i], 2 * kMiB, &sum) != CUDA_SUCCESS) {
            ++failed_calls;
          } else if (sum != PatternChecksum(2 * kMiB, seed(t, round, i))) {
            ++mismatches;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failed_calls.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(fake_.faults(), 0u);
  EXPECT_GT(core_->stats().demotions, 0u);
  for (int t = 0; t < kThreads; ++t) {
    std::vector<std::pair<CUdeviceptr, uint64_t>> expected;
    for (int i = 0; i < kBlocksEach; ++i)
      expected.push_back({blocks[t][i], seed(t, kRounds - 1, i)});
    ExpectPatterns(streams[t], 2 * kMiB, expected);
  }
}

// Note [host slots of other cores] (host_peers.h): two cores, as of two
// devices of one process, share one 8 MiB host budget (4 slots); each has a
// spill tier of its own (SharedHostBudgetNoSpillTest: neither has one).
class SharedHostBudgetSpillTest : public ShimCoreSpillTest {
 protected:
  // The peers of each core: the other one.
  class OtherCore final : public HostPeers {
   public:
    explicit OtherCore(SharedHostBudgetSpillTest* test) : test_(test) {}
    uint64_t ReclaimHostFromPeers(const ShimCore* asker, uint64_t bytes) override {
      ++asked;
      ShimCore* other = asker == test_->core_.get() ? test_->other_.get() : test_->core_.get();
      return other->GiveBackHostBytes(bytes);
    }
    bool ReleasePeerFrees(const ShimCore* asker) override {
      ShimCore* other = asker == test_->core_.get() ? test_->other_.get() : test_->core_.get();
      return other->ReleaseCompletedFrees();
    }
    std::atomic<int> asked{0};

   private:
    SharedHostBudgetSpillTest* const test_;
  };

  void SetUp() override { MakeBoth(&plane_, &other_plane_); }
  void MakeBoth(ControlPlane* ours, ControlPlane* theirs) {
    host_ledger_ = &host_;
    overflow_ledger_ = &overflow_;
    host_peers_ = &peers_;
    Make(&fake_.driver(), 8 * kMiB, 8 * kMiB, "lru", theirs);
    other_ = std::move(core_);
    Make(&fake_.driver(), 8 * kMiB, 8 * kMiB, "lru", ours);
  }
  void TearDown() override {
    other_.reset();
    ShimCoreSpillTest::TearDown();
  }
  // Runs `fn` with the other core as core_.
  template <typename Fn>
  void OnOtherCore(Fn fn) {
    std::swap(core_, other_);
    fn();
    std::swap(core_, other_);
  }

  HostLedger host_;
  OverflowLedger overflow_{&host_};
  MemorySpillTier other_tier_{4, 64 * kMiB};
  SpillControlPlane other_plane_{&other_tier_};
  OtherCore peers_{this};
  std::unique_ptr<ShimCore> other_;
};

// The other core holds every host slot; this core's page-out then needs one
// and has no host chunk of its own to demote. The other core demotes some of
// its chunks instead (with nothing asked of it, the write fails with
// CUDA_ERROR_OUT_OF_MEMORY), and every block of both cores reads back.
TEST_F(SharedHostBudgetSpillTest, ACoreGetsHostSlotsTheOtherCoreHolds) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> theirs;
  OnOtherCore([&] {
    theirs = WriteBlocks(s, 8, /*seed=*/900);  // 4 on its device, 4 in host slots
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  });
  ASSERT_EQ(host_.limit(), 4u);
  ASSERT_EQ(host_.in_use(), 4u) << "the other core holds every host slot";
  const std::vector<CUdeviceptr> ours = WriteBlocks(s, 6);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_GT(peers_.asked.load(), 0);
  EXPECT_GT(other_->stats().demotions, 0u);
  EXPECT_GT(other_tier_.stored(), 0u);
  EXPECT_LE(host_.in_use(), host_.limit());
  ExpectBlocks(s, ours, 6);
  OnOtherCore([&] { ExpectBlocks(s, theirs, 8, /*seed=*/900); });
  EXPECT_EQ(fake_.faults(), 0u);
}

class SharedHostBudgetNoSpillTest : public SharedHostBudgetSpillTest {
 protected:
  void SetUp() override { MakeBoth(&no_tier_, &other_no_tier_); }
  SpillControlPlane no_tier_{nullptr};
  SpillControlPlane other_no_tier_{nullptr};
};

// Without a spill tier: the other core freed the blocks on its device, so
// what the process committed beyond its device budgets fits the host budget
// (this core's allocation is admitted), but the other core's host chunks
// still hold every slot. It moves them into its free device chunks and gives
// their slots back (without the request this core's write fails with
// CUDA_ERROR_OUT_OF_MEMORY although it was admitted).
TEST_F(SharedHostBudgetNoSpillTest, TheOtherCoreMovesHostChunksIntoItsFreeDeviceMemory) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> theirs;
  OnOtherCore([&] {
    theirs = WriteBlocks(s, 8, /*seed=*/900);  // 0-3 in host slots, 4-7 on its device
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    for (int i = 4; i < 8; ++i) {
      ASSERT_EQ(core_->TEST_ResidenceOf(theirs[i]), Residence::kDevice) << "block " << i;
      EXPECT_EQ(core_->Free(theirs[i]), CUDA_SUCCESS);
    }
  });
  ASSERT_EQ(host_.in_use(), 4u) << "the other core holds every host slot";
  const std::vector<CUdeviceptr> ours = WriteBlocks(s, 6);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_GT(peers_.asked.load(), 0);
  EXPECT_LE(host_.in_use(), host_.limit());
  ExpectBlocks(s, ours, 6);
  OnOtherCore([&] {
    EXPECT_EQ(core_->TEST_ResidenceOf(theirs[0]), Residence::kDevice);
    ExpectBlocks(s, theirs, 4, /*seed=*/900);
  });
  EXPECT_EQ(fake_.faults(), 0u);
}

TEST_F(ShimCoreSpillTest, FreedSpilledChunksAreDiscarded) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 16);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_GT(tier_.stored(), 0u);
  for (CUdeviceptr b : blocks) ASSERT_EQ(core_->Free(b), CUDA_SUCCESS);
  EXPECT_EQ(tier_.stored(), 0u);
  EXPECT_EQ(core_->stats().spilled_chunks, 0u);
}

TEST_F(ShimCoreSpillTest, FullSpillTierKeepsDataAndFailsTheAccessWithOutOfMemory) {
  CUstream s = fake_.CreateStream();
  tier_.no_space = true;
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 8);  // exactly device + host
  CUdeviceptr extra;
  ASSERT_EQ(core_->Alloc(&extra, 2 * kMiB), CUDA_SUCCESS);  // virtual capacity allows it
  EXPECT_EQ(Write(s, extra, 2 * kMiB, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_GT(core_->stats().spill_failures, 0u);
  ExpectBlocks(s, blocks, 8);  // nothing lost
}

TEST_F(ShimCoreSpillTest, FailedLoadFailsTheAccessInsteadOfReturningWrongData) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 12);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kNvme);
  tier_.fail_loads = true;
  bool ran = false;
  EXPECT_EQ(Launch(s, {blocks[0]}, 2 * kMiB, [&ran] { ran = true; }), CUDA_ERROR_ECC_UNCORRECTABLE);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_FALSE(ran);
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kNvme);  // still stored: may be retried
  tier_.fail_loads = false;
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, blocks[0], 2 * kMiB, &sum), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 500));
}

TEST_F(ShimCoreSpillTest, OpaqueLaunchPromotesEverySpilledChunkOrFails) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 12);
  CUfunction opaque = fake_.MakeFunction({}, /*opaque=*/true);
  void* no_args[] = {nullptr};
  ShimCore::Ticket ticket;
  // 24 MiB of live data cannot all be mapped in 16 MiB of device + host.
  EXPECT_EQ(core_->BeforeLaunch(opaque, no_args, nullptr, s, false, &ticket),
            CUDA_ERROR_OUT_OF_MEMORY);
  for (int i = 8; i < 12; ++i) ASSERT_EQ(core_->Free(blocks[i]), CUDA_SUCCESS);
  ASSERT_EQ(core_->BeforeLaunch(opaque, no_args, nullptr, s, false, &ticket), CUDA_SUCCESS);
  std::vector<uint64_t> sums(8, 0);
  for (int i = 0; i < 8; ++i) {
    CUdeviceptr p = blocks[i];
    fake_.EnqueueTouch(s, p, 2 * kMiB,
                       [p, i, &sums] { sums[i] = Checksum(reinterpret_cast<void*>(p), 2 * kMiB); });
  }
  ticket.Close();
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_EQ(fake_.faults(), 0u);
  EXPECT_EQ(core_->stats().spilled_chunks, 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(sums[i], PatternChecksum(2 * kMiB, 500 + i));
}

TEST_F(ShimCoreSpillTest, LowerHostBudgetDemotesTheExcess) {
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 8);  // device and host tier full
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const CoreStats full = core_->stats();
  ASSERT_EQ(full.host_slots_in_use, 4u);
  core_->SetHostBudget(4 * kMiB);
  const CoreStats lowered = core_->stats();
  EXPECT_EQ(lowered.host_slots_in_use, 2u);
  EXPECT_EQ(lowered.spilled_chunks - full.spilled_chunks, 2u);
  EXPECT_EQ(core_->DemoteHostBytes(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(core_->stats().host_slots_in_use, 1u);
  EXPECT_EQ(core_->stats().spilled_chunks - full.spilled_chunks, 3u);
  ExpectBlocks(s, blocks, 8);
  EXPECT_LE(core_->stats().host_slots_in_use, 2u);  // the budget holds while paging
}

// Note [demotion queue]: one scan of the chunk table serves several batches
// of demotions, least recently used first, and the data stays right.
TEST_F(ShimCoreSpillTest, OneScanServesSeveralDemotionBatches) {
  MemorySpillTier tier(4, 128 * kMiB);
  SpillControlPlane plane(&tier);
  Make(&fake_.driver(), 8 * kMiB, 64 * kMiB, "lru", &plane);
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 36);  // 4 device + 32 host chunks
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  const CoreStats full = core_->stats();
  ASSERT_GE(full.host_slots_in_use, 28u);
  core_->SetHostBudget(8 * kMiB);  // 24 or more chunks to demote: 6 or more batches of 4
  const CoreStats lowered = core_->stats();
  EXPECT_EQ(lowered.spilled_chunks - full.spilled_chunks, full.host_slots_in_use - 4);
  // One scan per batch would be 6 or more here (and one per 4 demotions).
  EXPECT_LE(lowered.demotion_scans - full.demotion_scans, 1u);
  EXPECT_LT(4 * lowered.demotion_scans, lowered.demotions);
  // The least recently written went first: every block still in host memory
  // was written after every demoted one.
  int newest_demoted = -1, oldest_kept = 36;
  for (int i = 0; i < 36; ++i) {
    const Residence r = core_->TEST_ResidenceOf(blocks[i]);
    if (r == Residence::kNvme) newest_demoted = i;
    if (r == Residence::kHost) oldest_kept = std::min(oldest_kept, i);
  }
  EXPECT_LT(newest_demoted, oldest_kept);
  ExpectBlocks(s, blocks, 36);
  EXPECT_EQ(fake_.faults(), 0u);
  core_.reset();  // the core uses plane and tier until destroyed
}

TEST_F(ShimCoreSpillTest, LifetimePolicyLoadsSpilledChunksAheadOfUse) {
  Make(&fake_.driver(), 8 * kMiB, 8 * kMiB, "lifetime", &plane_);
  CUstream s = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 20);
  // Iterations over the same sequence: the policy learns the order and asks
  // for the spilled chunks before they are used.
  for (int round = 0; round < 3; ++round) ExpectBlocks(s, blocks, 20);
  const CoreStats learned = core_->stats();
  ExpectBlocks(s, blocks, 20);
  const CoreStats last = core_->stats();
  // Once the order is learned, most promotions find their data already loaded
  // (measured: 5 of 20 read on demand per round; with lru all 20 are).
  EXPECT_LT(2 * (last.promotion_reads - learned.promotion_reads),
            last.promotions - learned.promotions);
  const CoreStats st = core_->stats();
  EXPECT_GT(st.spill_prefetches, 0u);
  EXPECT_LT(st.promotion_reads, st.promotions);  // some promotions found their data loaded
  EXPECT_GT(st.demotions, 0u);
  EXPECT_EQ(fake_.faults(), 0u);
}

// Note [failed transitions]: each step of a promotion or a demotion that
// fails leaves the chunk where its bytes are, checked by checksum after the
// failure and after a retry.
// Note [waits outside the lock]: a promotion that finds every device chunk
// in use waits for one, without the core lock, rather than settling for a
// host slot.
TEST_F(ShimCoreSpillTest, PromotionWaitsForABusyDeviceChunkRatherThanTakingAHostSlot) {
  CUstream s = fake_.CreateStream();
  CUstream held = fake_.CreateStream();
  std::vector<CUdeviceptr> blocks = WriteBlocks(s, 12);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  ASSERT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kNvme);
  // Every device chunk gets work that runs only when the host waits for it.
  fake_.Hold(held);
  for (int i = 8; i < 12; ++i) {
    ASSERT_EQ(core_->TEST_ResidenceOf(blocks[i]), Residence::kDevice) << "block " << i;
    ASSERT_EQ(Write(held, blocks[i], 2 * kMiB, 500 + i), CUDA_SUCCESS);
  }
  const uint64_t waits = core_->stats().host_waits;
  uint64_t sum = 0;
  ASSERT_EQ(Read(s, blocks[0], 2 * kMiB, &sum), CUDA_SUCCESS);
  fake_.Release(held);
  ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
  EXPECT_GT(core_->stats().host_waits, waits);
  EXPECT_EQ(core_->TEST_ResidenceOf(blocks[0]), Residence::kDevice);
  EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 500));
  ExpectBlocks(s, blocks, 12);
  EXPECT_EQ(fake_.faults(), 0u);
}

class ShimCoreSpillFaultTest : public ShimCoreSpillTest {
 protected:
  void SetUp() override { MakeWithFaults(8 * kMiB, 8 * kMiB, "lru", &plane_); }

  // 12 blocks (4 on the device, 4 in host memory, 4 stored), then one device
  // block freed so that a promotion needs no eviction. Returns a stored block.
  int Prepare(CUstream s) {
    blocks_ = WriteBlocks(s, 12);
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    int stored = -1;
    for (int i = 11; i >= 0; --i) {
      const Residence r = core_->TEST_ResidenceOf(blocks_[i]);
      if (r == Residence::kDevice && freed_ < 0) freed_ = i;
      if (r == Residence::kNvme) stored = i;
    }
    EXPECT_GE(freed_, 0);
    EXPECT_EQ(core_->Free(blocks_[freed_]), CUDA_SUCCESS);
    EXPECT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_GE(stored, 0);
    return stored;
  }

  // Every live block has its bytes (reads them one by one).
  void ExpectLiveBlocks(CUstream s) {
    for (int i = 0; i < 12; ++i) {
      if (i == freed_) continue;
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, blocks_[i], 2 * kMiB, &sum), CUDA_SUCCESS) << "block " << i;
      ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(2 * kMiB, 500 + i)) << "block " << i;
    }
    EXPECT_EQ(fake_.faults(), 0u);
  }

  void ExpectFailedPromotionKeepsTheStoredCopy(const std::function<void()>& arm) {
    CUstream s = fake_.CreateStream();
    const int i = Prepare(s);
    const size_t stored = tier_.stored();
    arm();
    bool ran = false;
    EXPECT_NE(Launch(s, {blocks_[i]}, 2 * kMiB, [&ran] { ran = true; }), CUDA_SUCCESS);
    DisarmAll();
    ASSERT_EQ(core_->TEST_Synchronize(), CUDA_SUCCESS);
    EXPECT_FALSE(ran);
    EXPECT_EQ(core_->TEST_ResidenceOf(blocks_[i]), Residence::kNvme);
    EXPECT_EQ(tier_.stored(), stored);
    EXPECT_EQ(core_->stats().spilled_chunks, stored);
    ExpectLiveBlocks(s);
  }

  // A host-tier block, checked through its host mapping.
  int HostBlock() {
    for (int i = 0; i < 12; ++i) {
      if (i != freed_ && core_->TEST_ResidenceOf(blocks_[i]) == Residence::kHost) return i;
    }
    ADD_FAILURE() << "no host-tier block";
    return 0;
  }

  void ExpectFailedDemotionKeepsTheHostCopy(const std::function<void()>& arm) {
    CUstream s = fake_.CreateStream();
    Prepare(s);
    const size_t stored = tier_.stored();
    arm();
    EXPECT_EQ(core_->DemoteHostBytes(2 * kMiB), 0u);
    DisarmAll();
    EXPECT_EQ(tier_.stored(), stored);
    for (int i = 0; i < 12; ++i) {
      if (i == freed_ || core_->TEST_ResidenceOf(blocks_[i]) != Residence::kHost) continue;
      EXPECT_TRUE(fake_.IsMapped(blocks_[i], 2 * kMiB)) << i;
      EXPECT_EQ(Checksum(reinterpret_cast<void*>(blocks_[i]), 2 * kMiB),
                PatternChecksum(2 * kMiB, 500 + i))
          << i;
    }
    EXPECT_EQ(core_->DemoteHostBytes(2 * kMiB), 2 * kMiB);  // the retry
    EXPECT_EQ(tier_.stored(), stored + 1);
    ExpectLiveBlocks(s);
  }

  void DisarmAll() {
    Disarm();
    tier_.no_space = false;
    tier_.fail_loads = false;
  }

  std::vector<CUdeviceptr> blocks_;
  int freed_ = -1;
};

TEST_F(ShimCoreSpillFaultTest, PromotionMapFailureKeepsTheStoredCopy) {
  ExpectFailedPromotionKeepsTheStoredCopy([this] { faults_->FailMemMap(1); });
}

TEST_F(ShimCoreSpillFaultTest, PromotionSetAccessFailureKeepsTheStoredCopy) {
  ExpectFailedPromotionKeepsTheStoredCopy([this] { faults_->FailSetAccess(1); });
}

TEST_F(ShimCoreSpillFaultTest, PromotionCopyFailureKeepsTheStoredCopy) {
  ExpectFailedPromotionKeepsTheStoredCopy([this] { faults_->FailHostCopy(1); });
}

TEST_F(ShimCoreSpillFaultTest, PromotionLoadFailureKeepsTheStoredCopy) {
  ExpectFailedPromotionKeepsTheStoredCopy([this] { tier_.fail_loads = true; });
}

TEST_F(ShimCoreSpillFaultTest, PromotionWhoseFillCannotBeAwaitedIsUndone) {
  // The event after the copy, and the host wait that replaces it, fail: the
  // stored copy must not have been discarded.
  ExpectFailedPromotionKeepsTheStoredCopy([this] { faults_->FailEventRecord(1000); });
}

TEST_F(ShimCoreSpillFaultTest, DemotionCopyFailureKeepsTheHostCopy) {
  ExpectFailedDemotionKeepsTheHostCopy([this] { faults_->FailHostCopy(1); });
}

TEST_F(ShimCoreSpillFaultTest, DemotionWaitFailureKeepsTheHostCopy) {
  ExpectFailedDemotionKeepsTheHostCopy([this] { faults_->FailEventRecord(1000); });
}

TEST_F(ShimCoreSpillFaultTest, DemotionStoreFailureKeepsTheHostCopy) {
  ExpectFailedDemotionKeepsTheHostCopy([this] { tier_.no_space = true; });
}

TEST_F(ShimCoreSpillFaultTest, DemotionUnmapFailureKeepsTheHostCopy) {
  ExpectFailedDemotionKeepsTheHostCopy([this] { faults_->FailMemUnmap(1); });
}

}  // namespace
}  // namespace memvirt::shim

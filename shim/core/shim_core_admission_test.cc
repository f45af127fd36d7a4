// Note [shared admission] (overflow_ledger.h): the cores of one process admit
// allocations beyond their device budgets against the host budget (and spill
// capacity) they share, so the allocation that crosses the line fails at
// allocation time and every earlier one keeps its bytes.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "shim/core/block_allocator.h"
#include "shim/core/chunk_table.h"
#include "shim/core/overflow_ledger.h"
#include "shim/core/shim_core.h"
#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

TEST(OverflowLedgerTest, CapacityIsTheHostLimitInForcePlusTheSpillCapacityCountedOnce) {
  HostLedger host;
  OverflowLedger ledger(&host);
  EXPECT_EQ(ledger.capacity(), 0u);
  EXPECT_FALSE(ledger.TryCharge(1));
  host.InitLimit(8);
  EXPECT_EQ(ledger.InitSpillChunks(4), 4u);
  EXPECT_EQ(ledger.InitSpillChunks(4), 4u);  // a second core's channel to the same store
  EXPECT_EQ(ledger.capacity(), 12u);
  EXPECT_TRUE(ledger.TryCharge(10));
  EXPECT_FALSE(ledger.TryCharge(3));
  EXPECT_EQ(ledger.charged(), 10u);
  EXPECT_TRUE(ledger.TryCharge(2));
  EXPECT_EQ(ledger.available(), 0u);
  ledger.Release(5);
  EXPECT_EQ(ledger.available(), 5u);
}

// A lowered host budget (the daemon's HOST_BUDGET) keeps what was admitted
// and admits nothing more until the process is back under it.
TEST(OverflowLedgerTest, ALoweredHostLimitKeepsWhatWasAdmittedAndRefusesMore) {
  HostLedger host;
  host.InitLimit(8);
  OverflowLedger ledger(&host);
  ASSERT_TRUE(ledger.TryCharge(6));
  host.SetLimit(4);
  EXPECT_EQ(ledger.charged(), 6u);  // nothing fails retroactively
  EXPECT_EQ(ledger.available(), 0u);
  EXPECT_FALSE(ledger.TryCharge(1));
  ledger.Release(3);
  EXPECT_TRUE(ledger.TryCharge(1));
  EXPECT_FALSE(ledger.TryCharge(1));
}

// Two allocators (two devices' cores) with 4 chunks of device budget each
// and a 12-chunk capacity each share 8 chunks of overflow.
TEST(BlockAllocatorAdmissionTest, ChunksBeyondTheOwnBudgetAreChargedToTheSharedLedger) {
  HostLedger host;
  host.InitLimit(8);
  OverflowLedger ledger(&host);
  ChunkTable table_a(0, 64), table_b(1ull << 40, 64);
  auto a = std::make_unique<BlockAllocator>(&table_a, 12);
  auto b = std::make_unique<BlockAllocator>(&table_b, 12);
  a->ShareOverflow(&ledger, 4);
  b->ShareOverflow(&ledger, 4);

  BlockAllocator::Allocation big_a, big_b, more;
  ASSERT_TRUE(a->Allocate(10 * kChunkBytes, &big_a));  // 6 beyond a's budget
  EXPECT_EQ(ledger.charged(), 6u);
  EXPECT_EQ(b->admissible_chunks(), 4u + 2u);
  ASSERT_TRUE(b->Allocate(6 * kChunkBytes, &big_b));  // 2 beyond b's
  EXPECT_EQ(ledger.charged(), 8u);
  EXPECT_FALSE(b->Allocate(kChunkBytes, &more));  // within b's capacity, not the process's
  EXPECT_FALSE(a->Allocate(kChunkBytes, &more));
  EXPECT_FALSE(a->Allocate(100, &more));  // a new slab chunk is a chunk too
  EXPECT_EQ(ledger.charged(), 8u);
  EXPECT_EQ(a->admissible_chunks(), 0u);

  BlockAllocator::Release rel;
  ASSERT_TRUE(a->Free(big_a.offset, &rel));
  EXPECT_EQ(ledger.charged(), 2u);
  ASSERT_TRUE(b->Allocate(4 * kChunkBytes, &more));
  EXPECT_EQ(ledger.charged(), 6u);
  // A virtual handle's capacity (Commit) is admitted and released the same way.
  EXPECT_TRUE(a->Commit(6));
  EXPECT_EQ(ledger.charged(), 8u);
  EXPECT_FALSE(a->Commit(1));
  a->Uncommit(6);
  EXPECT_EQ(ledger.charged(), 6u);
  b.reset();  // a core going away gives its charge back
  EXPECT_EQ(ledger.charged(), 0u);
}

// Two cores of one process (a second device) over the fake driver, sharing
// one host budget: 8 MiB of device budget each, 16 MiB of host budget for
// both. Each core alone would admit 24 MiB; together they hold 32 MiB.
class SharedAdmissionTest : public ShimCoreTest {
 protected:
  static constexpr uint64_t kDevice = 8 * kMiB;
  static constexpr uint64_t kHost = 16 * kMiB;
  static constexpr uint64_t kBlock = 2 * kMiB;

  void SetUp() override {
    for (auto& core : cores_) {
      CoreOptions options;
      options.device_budget = kDevice;
      options.host_budget = kHost;
      options.host_ledger = &host_;
      options.overflow_ledger = &overflow_;
      options.va_bytes = 256 * kMiB;
      options.event_batch = 4;
      options.event_pace = 0;
      ASSERT_EQ(ShimCore::Create(&fake_.driver(), options, &control_, &core), CUDA_SUCCESS);
    }
    for (CUstream& s : streams_) s = fake_.CreateStream();
  }
  void TearDown() override {
    for (auto& core : cores_) core.reset();
  }

  // Runs `body` as a kernel touching [p, p + kBlock) on core `core`'s stream.
  CUresult LaunchOn(int core, CUdeviceptr p, std::function<void()> body) {
    CUdeviceptr arg = p;
    void* params[] = {&arg};
    ShimCore::Ticket ticket;
    const CUresult r =
        cores_[core]->BeforeLaunch(Function(1), params, nullptr, streams_[core], false, &ticket);
    if (r != CUDA_SUCCESS) return r;
    fake_.EnqueueTouch(streams_[core], p, kBlock, std::move(body));
    return CUDA_SUCCESS;
  }

  struct Block {
    int core;
    CUdeviceptr ptr;
    uint64_t seed;
  };
  // Allocates kBlock blocks alternately on the two cores and writes each,
  // until an allocation fails; returns its result. A write that fails after
  // its allocation succeeded (a page-out without room) is a test failure.
  CUresult FillUntilRefused(std::vector<Block>* blocks) {
    for (int i = 0;; ++i) {
      const int c = i % 2;
      CUdeviceptr p = 0;
      const CUresult r = cores_[c]->Alloc(&p, kBlock);
      if (r != CUDA_SUCCESS) return r;
      const uint64_t seed = 1000 + i;
      const CUresult w =
          LaunchOn(c, p, [p, seed] { FillPattern(reinterpret_cast<void*>(p), kBlock, seed); });
      if (w != CUDA_SUCCESS) {
        ADD_FAILURE() << "block " << i << " was admitted, and its write failed (" << w << ")";
        return w;
      }
      blocks->push_back({c, p, seed});
    }
  }
  void ExpectBytesKept(const std::vector<Block>& blocks) {
    for (const Block& b : blocks) {
      uint64_t sum = 0;
      const CUdeviceptr p = b.ptr;
      ASSERT_EQ(
          LaunchOn(b.core, p, [p, &sum] { sum = Checksum(reinterpret_cast<void*>(p), kBlock); }),
          CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(kBlock, b.seed)) << "block of core " << b.core;
    }
  }

  HostLedger host_;
  OverflowLedger overflow_{&host_};
  std::unique_ptr<ShimCore> cores_[2];
  CUstream streams_[2] = {};
};

TEST_F(SharedAdmissionTest, TheAllocationBeyondBothDevicesAndTheSharedHostBudgetFails) {
  std::vector<Block> blocks;
  EXPECT_EQ(FillUntilRefused(&blocks), CUDA_ERROR_OUT_OF_MEMORY);
  // 2 x 8 MiB of device budget + 16 MiB of host budget, not 2 x 24 MiB.
  EXPECT_EQ(blocks.size() * kBlock, 2 * kDevice + kHost);
  ExpectBytesKept(blocks);
  for (auto& core : cores_) {
    size_t free = 1, total = 0;
    ASSERT_EQ(core->GetInfo(&free, &total), CUDA_SUCCESS);
    EXPECT_EQ(total, kDevice + kHost);  // each core's virtual capacity
    EXPECT_EQ(free, 0u);                // ... of which the process holds no more
  }

  // A block freed on one device makes room for the other.
  ASSERT_EQ(cores_[0]->Free(blocks[0].ptr), CUDA_SUCCESS);
  blocks.erase(blocks.begin());
  size_t free = 0, total = 0;
  ASSERT_EQ(cores_[1]->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, kBlock);
  CUdeviceptr p = 0;
  ASSERT_EQ(cores_[1]->Alloc(&p, kBlock), CUDA_SUCCESS);
  ASSERT_EQ(LaunchOn(1, p, [p] { FillPattern(reinterpret_cast<void*>(p), kBlock, 7); }),
            CUDA_SUCCESS);
  blocks.push_back({1, p, 7});
  CUdeviceptr refused = 0;
  EXPECT_EQ(cores_[0]->Alloc(&refused, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cores_[1]->Alloc(&refused, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  ExpectBytesKept(blocks);
  for (auto& core : cores_) ASSERT_EQ(core->TEST_Synchronize(), CUDA_SUCCESS);
}

// Within its own device budget a core admits allocations whatever the other
// core holds beyond its own: the shared part is the host budget only.
TEST_F(SharedAdmissionTest, ADeviceBudgetIsNotTakenByTheOtherDevicesOverflow) {
  std::vector<CUdeviceptr> a;
  for (uint64_t b = 0; b < kDevice + kHost; b += kBlock) {
    CUdeviceptr p = 0;
    ASSERT_EQ(cores_[0]->Alloc(&p, kBlock), CUDA_SUCCESS);
    a.push_back(p);
  }
  CUdeviceptr p = 0;
  EXPECT_EQ(cores_[0]->Alloc(&p, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free = 0, total = 0;
  ASSERT_EQ(cores_[1]->GetInfo(&free, &total), CUDA_SUCCESS);
  EXPECT_EQ(free, kDevice);
  for (uint64_t b = 0; b < kDevice; b += kBlock) {
    ASSERT_EQ(cores_[1]->Alloc(&p, kBlock), CUDA_SUCCESS);
  }
  EXPECT_EQ(cores_[1]->Alloc(&p, kBlock), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(overflow_.charged(), kHost / kChunkBytes);
}

}  // namespace
}  // namespace memvirt::shim

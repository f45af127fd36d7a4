// TransitionTest: a test fixture with the pieces a chunk transition works on
// (TransitionParts), over the fake driver, for the unit tests of the classes
// that carry transitions out (PageOutPipeline, SpillManager, FillBatch,
// FreedChunks): a reservation of `chunks` chunks with its chunk table, a
// physical pool, a copy stream tracked by a StreamTracker, a ScriptedPolicy
// and CoreStats; helpers that place a chunk's bytes on the device or in a
// host slot and read them back by checksum.
//
// A derived fixture calls InitParts() in SetUp (ASSERT on its result), may
// change driver_ (a copy of the fault injector's table) before that, and
// destroys the class under test in its TearDown after calling this one's
// (which clears the faults and runs the copy stream dry). The destructor
// unmaps every chunk and frees the reservation.
#ifndef MEMVIRT_SHIM_TESTING_TRANSITION_TEST_H_
#define MEMVIRT_SHIM_TESTING_TRANSITION_TEST_H_

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "shim/core/chunk_table.h"
#include "shim/core/core_stats.h"
#include "shim/core/physical_pool.h"
#include "shim/core/shim_core_test_fixture.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/transition_parts.h"
#include "shim/testing/fake_driver.h"
#include "shim/testing/scripted_policy.h"

namespace memvirt::shim::testing {

class TransitionTest : public ::testing::Test {
 protected:
  explicit TransitionTest(uint32_t chunks) : chunks_(chunks) {}
  ~TransitionTest() override {
    for (uint32_t c = 0; c < chunks_; ++c) {
      if (fake_.IsMapped(Address(c), kChunkBytes)) {
        (void)driver_.cuMemUnmap(Address(c), kChunkBytes);
      }
    }
    pool_.reset();
    if (base_ != 0) driver_.cuMemAddressFree(base_, uint64_t{chunks_} * kChunkBytes);
  }

  void TearDown() override {
    faults_.ClearFaults();
    if (copy_stream_ != nullptr) fake_.Release(copy_stream_);
    if (tracker_ != nullptr) (void)tracker_->WaitForAll();
  }

  // Reserves the chunks' addresses, makes a pool of `device_chunks` and
  // `host_chunks` and the copy stream (tracked, event batch 4).
  CUresult InitParts(uint32_t device_chunks, uint32_t host_chunks) {
    CUresult r =
        driver_.cuMemAddressReserve(&base_, uint64_t{chunks_} * kChunkBytes, kChunkBytes, 0, 0);
    if (r != CUDA_SUCCESS) return r;
    table_ = ChunkTable(base_, chunks_);
    table_.Materialize(chunks_);
    pool_ = std::make_unique<PhysicalPool>(&driver_, 0, 0);
    if ((r = pool_->Init(device_chunks, host_chunks)) != CUDA_SUCCESS) return r;
    if ((r = driver_.cuStreamCreate(&copy_stream_, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
      return r;
    }
    tracker_ = std::make_unique<StreamTracker>(&driver_, 4);
    copy_index_ = tracker_->Adopt(copy_stream_);
    return CUDA_SUCCESS;
  }

  TransitionParts parts() {
    return TransitionParts{
        .driver = &driver_,
        .table = &table_,
        .pool = pool_.get(),
        .tracker = tracker_.get(),
        .copy_index = copy_index_,
        .copy_stream = copy_stream_,
        .policy = &policy_,
        .stats = &stats_,
    };
  }

  CUdeviceptr Address(uint32_t c) const {
    return base_ + (static_cast<uint64_t>(c) << kChunkShift);
  }
  static uint64_t BytesAt(CUdeviceptr p) {
    return Checksum(reinterpret_cast<void*>(p), kChunkBytes);
  }

  // Chunk `c` as a one-chunk block (`live` false: a freed one, still
  // backed) on the device, mapped at its address, holding the pattern of
  // `seed`. Returns its device chunk.
  uint32_t MakeDeviceChunk(uint32_t c, uint64_t seed, bool live = true) {
    uint32_t dev = 0;
    EXPECT_EQ(pool_->AcquireDevice(&dev), CUDA_SUCCESS);
    EXPECT_EQ(pool_->MapAt(Address(c), pool_->device_handle(dev)), CUDA_SUCCESS);
    Place(c, Residence::kDevice, dev, live);
    FillPattern(reinterpret_cast<void*>(Address(c)), kChunkBytes, seed);
    return dev;
  }
  // The same in a host slot mapped at its address, last used by operation
  // `stamp`. Returns its slot.
  uint32_t MakeHostChunk(uint32_t c, uint64_t seed, uint64_t stamp = 1, bool live = true) {
    uint32_t slot = 0;
    EXPECT_EQ(pool_->AcquireHost(&slot), CUDA_SUCCESS);
    EXPECT_EQ(pool_->MapAt(Address(c), pool_->host_handle(slot)), CUDA_SUCCESS);
    Place(c, Residence::kHost, slot, live);
    table_[c].stamp = stamp;
    FillPattern(reinterpret_cast<void*>(Address(c)), kChunkBytes, seed);
    return slot;
  }

  FakeDriver fake_{64ull << 20};
  FaultInjector faults_{fake_.driver()};
  Driver driver_ = faults_.driver();
  CUdeviceptr base_ = 0;
  ChunkTable table_;
  std::unique_ptr<PhysicalPool> pool_;
  CUstream copy_stream_ = nullptr;
  std::unique_ptr<StreamTracker> tracker_;
  uint32_t copy_index_ = 0;
  ScriptedPolicy policy_;
  CoreStats stats_;

 private:
  void Place(uint32_t c, Residence where, uint32_t phys, bool live) {
    ChunkEntry& e = table_[c];
    e.kind = live ? ChunkKind::kLarge : ChunkKind::kFree;
    e.owner_first = live ? c : kNoIndex;
    e.owner_count = live ? 1 : 0;
    e.residence = where;
    e.phys = phys;
    e.live_data = live;
  }

  const uint32_t chunks_;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_TRANSITION_TEST_H_

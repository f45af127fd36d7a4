// TransitionTestBed: the pieces a chunk transition works on
// (TransitionParts), over the fake driver, for the unit tests of the classes
// that carry transitions out (PageOutPipeline, SpillManager, FillBatch,
// FreedChunks): a reservation of `chunks` chunks with its chunk table, a
// physical pool, a copy stream tracked by a StreamTracker, a ScriptedPolicy
// and CoreStats; helpers that place a chunk's bytes on the device or in a
// host slot and read them back by checksum.
//
// The owner calls Init() in SetUp (ASSERT on its result) and Drain() in
// TearDown after clearing its faults and before destroying the class under
// test; the destructor unmaps every chunk and frees the reservation.
#ifndef MEMVIRT_SHIM_TESTING_TRANSITION_TEST_BED_H_
#define MEMVIRT_SHIM_TESTING_TRANSITION_TEST_BED_H_

#include <cuda.h>

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

class TransitionTestBed {
 public:
  // `fake` and `driver` (the fake's table, or a copy of it) outlive the bed.
  TransitionTestBed(FakeDriver* fake, const Driver* driver, uint32_t chunks)
      : fake_(fake), driver_(driver), chunks_(chunks) {}
  TransitionTestBed(const TransitionTestBed&) = delete;
  TransitionTestBed& operator=(const TransitionTestBed&) = delete;
  ~TransitionTestBed() {
    for (uint32_t c = 0; c < chunks_; ++c) {
      if (fake_->IsMapped(Address(c), kChunkBytes)) {
        (void)driver_->cuMemUnmap(Address(c), kChunkBytes);
      }
    }
    pool.reset();
    if (base != 0) driver_->cuMemAddressFree(base, uint64_t{chunks_} * kChunkBytes);
  }

  // Reserves the chunks' addresses, makes a pool of `device_chunks` and
  // `host_chunks` and the copy stream (tracked, event batch 4).
  CUresult Init(uint32_t device_chunks, uint32_t host_chunks) {
    CUresult r =
        driver_->cuMemAddressReserve(&base, uint64_t{chunks_} * kChunkBytes, kChunkBytes, 0, 0);
    if (r != CUDA_SUCCESS) return r;
    table = ChunkTable(base, chunks_);
    table.Materialize(chunks_);
    pool = std::make_unique<PhysicalPool>(driver_, 0, 0);
    if ((r = pool->Init(device_chunks, host_chunks)) != CUDA_SUCCESS) return r;
    if ((r = driver_->cuStreamCreate(&copy_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
      return r;
    }
    tracker = std::make_unique<StreamTracker>(driver_, 4);
    copy_index = tracker->Adopt(copy_stream);
    return CUDA_SUCCESS;
  }
  // Runs the copy stream if it is held and waits for everything tracked.
  void Drain() {
    if (copy_stream != nullptr) fake_->Release(copy_stream);
    if (tracker != nullptr) (void)tracker->WaitForAll();
  }

  TransitionParts parts() {
    return TransitionParts{
        .driver = driver_,
        .table = &table,
        .pool = pool.get(),
        .tracker = tracker.get(),
        .copy_index = copy_index,
        .copy_stream = copy_stream,
        .policy = &policy,
        .stats = &stats,
    };
  }

  CUdeviceptr Address(uint32_t c) const { return base + (static_cast<uint64_t>(c) << kChunkShift); }
  static uint64_t BytesAt(CUdeviceptr p) {
    return Checksum(reinterpret_cast<void*>(p), kChunkBytes);
  }

  // Chunk `c` as a one-chunk block (`live` false: a freed one, still
  // backed) on the device, mapped at its address, holding the pattern of
  // `seed`. Returns its device chunk.
  uint32_t MakeDeviceChunk(uint32_t c, uint64_t seed, bool live = true) {
    uint32_t dev = 0;
    EXPECT_EQ(pool->AcquireDevice(&dev), CUDA_SUCCESS);
    EXPECT_EQ(pool->MapAt(Address(c), pool->device_handle(dev)), CUDA_SUCCESS);
    Place(c, Residence::kDevice, dev, live);
    FillPattern(reinterpret_cast<void*>(Address(c)), kChunkBytes, seed);
    return dev;
  }
  // The same in a host slot mapped at its address, last used by operation
  // `stamp`. Returns its slot.
  uint32_t MakeHostChunk(uint32_t c, uint64_t seed, uint64_t stamp = 1, bool live = true) {
    uint32_t slot = 0;
    EXPECT_EQ(pool->AcquireHost(&slot), CUDA_SUCCESS);
    EXPECT_EQ(pool->MapAt(Address(c), pool->host_handle(slot)), CUDA_SUCCESS);
    Place(c, Residence::kHost, slot, live);
    table[c].stamp = stamp;
    FillPattern(reinterpret_cast<void*>(Address(c)), kChunkBytes, seed);
    return slot;
  }

  CUdeviceptr base = 0;
  ChunkTable table;
  std::unique_ptr<PhysicalPool> pool;
  CUstream copy_stream = nullptr;
  std::unique_ptr<StreamTracker> tracker;
  uint32_t copy_index = 0;
  ScriptedPolicy policy;
  CoreStats stats;

 private:
  void Place(uint32_t c, Residence where, uint32_t phys, bool live) {
    ChunkEntry& e = table[c];
    e.kind = live ? ChunkKind::kLarge : ChunkKind::kFree;
    e.owner_first = live ? c : kNoIndex;
    e.owner_count = live ? 1 : 0;
    e.residence = where;
    e.phys = phys;
    e.live_data = live;
  }

  FakeDriver* const fake_;
  const Driver* const driver_;
  const uint32_t chunks_;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_TRANSITION_TEST_BED_H_

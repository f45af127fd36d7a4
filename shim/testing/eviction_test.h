// EvictionTest: a TransitionTest with the pieces an eviction works with
// (chunk uses, freed chunks, a page-out pipeline over the pool's free host
// slots, a touch set, a victim picker) and RecordingCore, the core's side for Evictor and
// Residency (its waits and both owners), which records what it is asked; for
// the unit tests of Evictor and Residency.
//
// A derived fixture calls InitEviction() in SetUp (ASSERT on its result),
// then MakeEvictor(); its TearDown destroys what it added after calling this
// one's.
#ifndef MEMVIRT_SHIM_TESTING_EVICTION_TEST_H_
#define MEMVIRT_SHIM_TESTING_EVICTION_TEST_H_

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "shim/core/chunk_uses.h"
#include "shim/core/core_waits.h"
#include "shim/core/evictor.h"
#include "shim/core/freed_chunks.h"
#include "shim/core/page_out_pipeline.h"
#include "shim/core/residency.h"
#include "shim/core/touch_set.h"
#include "shim/core/victim_picker.h"
#include "shim/testing/transition_test.h"

namespace memvirt::shim::testing {

// Defers when told to, waits through ChunkUses, hands out the pool's free
// host slots, and records what it was asked.
class RecordingCore final : public CoreWaits, public Evictor::Owner, public Residency::Owner {
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
  CUresult WaitChunkIdle(uint32_t chunk) override {
    waited.push_back(chunk);
    return uses->WaitIdle(chunk);
  }
  bool WaitsDeferred() const override {
    return !deferred_chunks.empty() || !deferred_copies.empty();
  }
  void OnOwnedDropped(uint32_t count) override { dropped_owned += count; }
  CUresult AcquireHost(uint32_t* slot) override { return pool->AcquireHost(slot); }
  void OnOwnedBacked() override { ++backed; }

  bool defer = false;
  ChunkUses* uses = nullptr;
  PhysicalPool* pool = nullptr;
  std::vector<uint32_t> deferred_chunks;
  std::vector<uint64_t> deferred_copies;
  std::vector<uint32_t> waited;
  uint32_t dropped_owned = 0;
  uint32_t backed = 0;
};

// Host slots for the page-outs: the pool's free ones.
class FreeHostSlots final : public PageOutPipeline::HostSlots {
 public:
  CUresult AcquireWaiting(uint32_t* slot) override { return pool->AcquireHost(slot); }
  void ReleaseAfter(uint32_t slot, uint64_t) override { pool->ReleaseHost(slot); }
  PhysicalPool* pool = nullptr;
};

class EvictionTest : public TransitionTest {
 protected:
  explicit EvictionTest(uint32_t chunks) : TransitionTest(chunks) {}
  void TearDown() override {
    TransitionTest::TearDown();
    evictor_.reset();
    freed_.reset();
    picker_.reset();
    touch_.reset();
    page_out_.reset();
  }

  // InitParts() and the pieces above; the touch set begins operation 1 (the
  // stamp MakeHostChunk gives by default).
  CUresult InitEviction(uint32_t device_chunks, uint32_t host_chunks) {
    if (const CUresult r = InitParts(device_chunks, host_chunks); r != CUDA_SUCCESS) return r;
    uses_ = std::make_unique<ChunkUses>(&table_, tracker_.get(), copy_index_);
    freed_ = std::make_unique<FreedChunks>(parts(), uses_.get());
    slots_.pool = pool_.get();
    page_out_ = std::make_unique<PageOutPipeline>(PageOutPipeline::Parts{parts(), &slots_});
    touch_ = std::make_unique<TouchSet>(&table_, page_out_.get());
    touch_->Begin();
    picker_ = std::make_unique<VictimPicker>(&table_, uses_.get(), &policy_, touch_.get());
    core_.uses = uses_.get();
    core_.pool = pool_.get();
    return CUDA_SUCCESS;
  }
  // The evictor, with look-ahead page-outs from `lookahead_min_chunks`.
  void MakeEvictor(uint32_t lookahead_min_chunks = kLookaheadMinChunks) {
    evictor_ = std::make_unique<Evictor>(Evictor::Parts{
        .page_out = page_out_.get(),
        .picker = picker_.get(),
        .tracker = tracker_.get(),
        .copy_index = copy_index_,
        .uses = uses_.get(),
        .pool = pool_.get(),
        .freed = freed_.get(),
        .waits = &core_,
        .owner = &core_,
        .lookahead_min_chunks = lookahead_min_chunks,
    });
  }

  std::unique_ptr<ChunkUses> uses_;
  std::unique_ptr<FreedChunks> freed_;
  FreeHostSlots slots_;
  std::unique_ptr<PageOutPipeline> page_out_;
  std::unique_ptr<TouchSet> touch_;
  std::unique_ptr<VictimPicker> picker_;
  RecordingCore core_;
  std::unique_ptr<Evictor> evictor_;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_EVICTION_TEST_H_

// Evictor: makes room on the device for the operation being prepared by
// paging chunks out (Note [eviction] and Note [pipelined page-out] in
// shim_core.h, Note [fenced page-outs] in shim_core_hidden_reach.cc; batch
// sizes: Note [eviction batches] in eviction_sizing.h).
//
// It decides what to evict and when to start and finish page-outs: a freed
// chunk is reclaimed first (no copy); the batch started last time is
// finished, usually without a wait; otherwise victims come from the picker
// (idle ones, else the best candidate still in use, waited for), are paged
// out in one batch, and a look-ahead batch of idle chunks is started behind
// them. The moves themselves are the PageOutPipeline's.
//
// Waits: a wait for a victim's uses or for page-out copies is first offered
// to the core to defer (CoreWaits); only if it does not defer is the wait
// made here (through the core, which counts it).
//
// Owns: the eviction's state between calls: the stream of the operation
// being made resident (Note [eviction]) and whether look-ahead page-outs may
// start. Not owned, given at construction and outliving it: the page-out
// pipeline, the victim picker, the stream tracker with the copy stream's
// index, the chunk uses, the physical pool (device chunks acquired and
// counted), the freed chunks (released first), the core's waits and the
// owner.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it), as it does for the
// collaborators.
#ifndef MEMVIRT_SHIM_CORE_EVICTOR_H_
#define MEMVIRT_SHIM_CORE_EVICTOR_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/chunk_uses.h"
#include "shim/core/core_waits.h"
#include "shim/core/eviction_sizing.h"
#include "shim/core/freed_chunks.h"
#include "shim/core/page_out_pipeline.h"
#include "shim/core/physical_pool.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/victim_picker.h"

namespace memvirt::shim {

class Evictor {
 public:
  // The owner's side: its count of unbacked chunks of live blocks.
  class Owner {
   public:
    // `count` victims of live blocks were dropped without a copy (their
    // data was dead): they are unbacked now.
    virtual void OnOwnedDropped(uint32_t count) = 0;

   protected:
    ~Owner() = default;
  };

  struct Parts {
    PageOutPipeline* page_out = nullptr;
    VictimPicker* picker = nullptr;
    StreamTracker* tracker = nullptr;
    uint32_t copy_index = 0;  // the copy stream's index in `tracker`
    ChunkUses* uses = nullptr;
    PhysicalPool* pool = nullptr;
    FreedChunks* freed = nullptr;
    CoreWaits* waits = nullptr;
    Owner* owner = nullptr;
    // The smallest budget with look-ahead page-outs (kLookaheadMinChunks
    // outside tests).
    uint32_t lookahead_min_chunks = kLookaheadMinChunks;
  };

  // REQUIRES: every pointer of `parts` non-null.
  explicit Evictor(const Parts& parts) : parts_(parts) {}
  Evictor(const Evictor&) = delete;
  Evictor& operator=(const Evictor&) = delete;

  // A free device chunk in *index; if none is free and `may_evict`, evicts
  // for one, in batches sized to the budget (Note [eviction batches]).
  // CUDA_ERROR_OUT_OF_MEMORY if none can be had (or a wait was deferred:
  // CoreWaits::WaitsDeferred()).
  [[nodiscard]] CUresult AcquireDevice(uint32_t* index, bool may_evict);

  // Frees at least one device chunk, evicting up to `want` victims in one
  // batch, then starts the page-out of `lookahead` more (Note [pipelined
  // page-out]); false if nothing could be freed (or a wait was deferred).
  bool EvictSome(uint32_t want, uint32_t lookahead);

  // The page-outs in flight, finished (waiting for their copies); returns the
  // chunks moved to the host tier (0 if none was in flight).
  uint32_t FinishPageOut();
  // CoreWaits::DeferCopyWait() for the page-outs in flight, if any.
  bool DeferPageOutWait();
  // Note [fenced page-outs]: finishes the page-outs in flight whose copies
  // completed, cancels the others; never waits.
  void SettleBeforeFence();

  // Note [eviction]: the stream of the operation being made resident (not
  // captured), kNoIndex otherwise: a chunk whose only pending uses are
  // earlier work on it is a candidate too.
  void set_launch_stream(uint32_t stream) { launch_stream_ = stream; }
  // Note [fenced page-outs]: false while a fenced launch makes its chunks
  // resident (no look-ahead page-out starts). Returns the previous value.
  bool set_lookahead_allowed(bool allowed) {
    const bool was = lookahead_allowed_;
    lookahead_allowed_ = allowed;
    return was;
  }

 private:
  // Releases the device chunk of one freed chunk; true if one was.
  bool ReclaimFreedDevice();
  // page_out's Start() with its drops reported to the owner; returns the
  // victims dropped without a copy.
  uint32_t StartPageOut(const std::vector<uint32_t>& victims, bool may_wait);
  // Pages `victims` out: started, then finished unless the wait for their
  // copies is deferred. Returns the device chunks freed.
  uint32_t EvictBatch(const std::vector<uint32_t>& victims);
  // Starts the page-out of up to `count` idle chunks, if allowed and none is
  // in flight.
  void StartLookahead(uint32_t count);

  const Parts parts_;
  uint32_t launch_stream_ = kNoIndex;
  bool lookahead_allowed_ = true;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_EVICTOR_H_

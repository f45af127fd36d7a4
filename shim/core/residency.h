// Residency: makes the chunks of the operation being prepared resident
// before it is enqueued (Note [residency before launch] in shim_core.h): each touched chunk
// not on the device is paged in (a device chunk, free or evicted for, then
// filled from its host slot or promoted from the spill tier, or first backed
// if it never was); when no device chunk can be had it runs from host memory
// (Note [host mapping]); prefetches the policy predicts fill what room is
// left; then the operation is ordered after its fills and its uses recorded.
//
// Waits: a busy host chunk's uses and a host wait for the fills are first
// offered to the core to defer (CoreWaits); with a deferred wait the
// operation fails with CUDA_ERROR_NOT_READY and runs again after it, instead
// of falling back to the host tier.
//
// Owns: the count of operations made resident (the policy's clock) and the
// prefetch candidates' buffer. Not owned, given at construction and
// outliving it: the transition parts (chunk table, pool, tracker with the
// copy stream, policy, statistics: page_ins through FillBatch,
// first_touches, host_fallbacks, prefetches), the chunk uses, the touch set,
// the evictor, the fill batch, the spill manager (null without a spill
// tier), the core's waits and the owner.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it), as it does for the
// collaborators.
#ifndef MEMVIRT_SHIM_CORE_RESIDENCY_H_
#define MEMVIRT_SHIM_CORE_RESIDENCY_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/chunk_uses.h"
#include "shim/core/core_waits.h"
#include "shim/core/evictor.h"
#include "shim/core/fill_batch.h"
#include "shim/core/spill_manager.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/touch_set.h"
#include "shim/core/transition_parts.h"

namespace memvirt::shim {

class Residency {
 public:
  // The owner's side: host slots and its count of unbacked chunks of live
  // blocks.
  class Owner {
   public:
    // A host slot, which may take waits or demotions (ShimCore::AcquireHost).
    [[nodiscard]] virtual CUresult AcquireHost(uint32_t* slot) = 0;
    // An unbacked chunk of a live block was backed (device or host).
    virtual void OnOwnedBacked() = 0;

   protected:
    ~Owner() = default;
  };

  struct Parts {
    TransitionParts transition;
    ChunkUses* uses = nullptr;
    TouchSet* touch = nullptr;
    Evictor* evictor = nullptr;
    FillBatch* fills = nullptr;
    SpillManager* spill = nullptr;  // null without a spill tier
    CoreWaits* waits = nullptr;
    Owner* owner = nullptr;
  };

  // REQUIRES: every pointer of `parts` but `spill` non-null.
  explicit Residency(const Parts& parts) : parts_(parts) {}
  Residency(const Residency&) = delete;
  Residency& operator=(const Residency&) = delete;

  // Makes the touch set resident for an operation on tracked stream
  // `stream`: pages in, prefetches, orders the operation after the fills
  // (on the host if `host_wait` or `capturing`, else stream-ordered) and,
  // unless `capturing`, records the uses of the touched and reached chunks
  // and opens the enqueue window (*ticket). `repeating`: the operation runs
  // again after a deferred wait (the policy saw its access already).
  // CUDA_ERROR_NOT_READY if a wait was deferred; another error if a chunk
  // cannot be made resident (the fills made stay committed: their chunks'
  // next users wait for them) or the fills cannot be awaited (undone).
  // Inline for the fast path (Note [residency before launch] in shim_core.h: an operation
  // whose chunks are resident only records its uses).
  [[nodiscard]] CUresult MakeResident(uint32_t stream, bool host_wait, bool capturing,
                                      bool repeating, EnqueueWindow* ticket) {
    const TransitionParts& t = parts_.transition;
    const TouchSet& touch = *parts_.touch;
    if (!repeating) t.policy->OnAccess(++step_, touch.touched().data(), touch.touched().size());
    if (!capturing && AllResident() &&
        (!t.policy->MayPrefetch() || t.pool->device_in_use() >= t.pool->device_limit())) {
      // Nothing to page, fill or prefetch.
      RecordUses(stream, ticket);
      return CUDA_SUCCESS;
    }
    return MakeResidentSlow(stream, host_wait, capturing, ticket);
  }

  // Pages `chunk` in (see above). With `may_evict` false it neither evicts
  // nor waits nor falls back to the host tier: CUDA_ERROR_OUT_OF_MEMORY or
  // CUDA_ERROR_NOT_READY instead.
  [[nodiscard]] CUresult PageIn(uint32_t chunk, bool may_evict);
  // Maps a host slot at unbacked `chunk` (now kHost).
  [[nodiscard]] CUresult PlaceOnHost(uint32_t chunk);

  // True if every touched chunk is on the device with its fill complete, and
  // every reached chunk's fill is complete: the operation needs no residency
  // work. Clears the fill_seq of chunks whose fill it found complete.
  bool AllResident() {
    ChunkTable& table = *parts_.transition.table;
    for (uint32_t c : parts_.touch->touched()) {
      ChunkEntry& e = table[c];
      if (e.residence != Residence::kDevice || !FillLanded(&e)) return false;
    }
    for (uint32_t c : parts_.touch->reached()) {  // wherever they are, their fills must complete
      if (!FillLanded(&table[c])) return false;
    }
    return true;
  }

 private:
  // True if *e has no fill pending (one known complete is cleared: later
  // checks stop at fill_seq).
  bool FillLanded(ChunkEntry* e) {
    if (e->fill_seq == 0) return true;
    const TransitionParts& t = parts_.transition;
    if (!t.tracker->IsComplete(t.copy_index, e->fill_seq)) return false;
    e->fill_seq = 0;
    return true;
  }
  // Promotes kNvme `chunk`; a success is a fill of the operation.
  [[nodiscard]] CUresult Promote(uint32_t chunk);
  // MakeResident() past its fast path (the touch set's policy access
  // recorded).
  [[nodiscard]] CUresult MakeResidentSlow(uint32_t stream, bool host_wait, bool capturing,
                                          EnqueueWindow* ticket);
  // Records the touched and reached chunks' uses by the operation, issued
  // on `stream`, and opens its enqueue window.
  void RecordUses(uint32_t stream, EnqueueWindow* ticket) {
    StreamTracker& tracker = *parts_.transition.tracker;
    ChunkUses& uses = *parts_.uses;
    const uint64_t seq = tracker.Issue(stream);
    for (uint32_t c : parts_.touch->touched()) uses.Add(c, stream, seq);
    for (uint32_t c : parts_.touch->reached()) uses.Add(c, stream, seq);
    *ticket = tracker.BeginEnqueue(stream);
  }

  const Parts parts_;
  uint64_t step_ = 0;               // operations made resident: the policy's clock
  std::vector<uint32_t> prefetch_;  // MakeResident's candidates (reused buffer)
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_RESIDENCY_H_

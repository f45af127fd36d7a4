// PageOutPipeline: the page-outs of one ShimCore (device -> host tier),
// started together and finished later (Note [pipelined page-out] in
// shim_core.h), with page-out's part of Note [failed transitions] there.
//
// Start() enqueues, for each victim (a device-resident chunk), a copy of its
// 2 MiB into a host slot on the core's copy stream and marks the chunk
// `evicting`; the chunk stays mapped on the device meanwhile. Finish() waits
// on the host for those copies, then gives each chunk's address to its host
// slot (unmap the device chunk, map the slot), releases the device chunk and
// makes the chunk kHost. Cancel() drops the move of a chunk used again
// before Finish(): its device copy stays authoritative, and its slot, which
// the copy may still be writing, is released at Finish().
//
// Owns: the moves in flight (chunk, host slot, cancelled) and the
// copy-stream sequence number that covers all of them. Not owned, given at
// construction and outliving the pipeline: the driver; the chunk table (of
// each victim it writes residence, phys, evicting and unmapped, and reads
// live_data and kind); the physical pool (host slots, device chunks,
// mappings); the stream tracker and the copy stream's index in it; the
// policy (told OnEvicted); the core's statistics (drops, evictions,
// cancelled_page_outs, host_waits); and HostSlots, the owner's side of host
// slots: the acquisition that may wait or demote, and the deferred release of
// a slot a copy may still be writing. Changes to the owner's counters are
// reported in the results instead (Started, Finished).
//
// Failure behaviour (Note [failed transitions]): bytes are never lost.
//   * A victim that gets no host slot, or whose copy cannot be enqueued,
//     stays on the device untouched, and Start() starts no later victim.
//   * A failed wait for the copies keeps every chunk of the batch on the
//     device (the host copies may be incomplete); their slots go to
//     HostSlots::ReleaseAfter(), to be reused once the copies completed.
//   * A failed unmap of the device chunk keeps the chunk on the device.
//   * A failed map of the host slot maps the device chunk back; the chunk
//     stays on the device. If that fails too, nothing is mapped at the
//     chunk's address: its host slot holds the bytes (the copy completed),
//     so the chunk becomes kHost marked `unmapped` (ChunkTable::SetUnmapped),
//     to be mapped by the owner at its next use.
//   In each case where the chunk stays on the device, its host slot is
//   released.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it), as it does for the
// collaborators above.
#ifndef MEMVIRT_SHIM_CORE_PAGE_OUT_PIPELINE_H_
#define MEMVIRT_SHIM_CORE_PAGE_OUT_PIPELINE_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/core_stats.h"
#include "shim/core/physical_pool.h"
#include "shim/core/residency_policy.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/transition_parts.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

class PageOutPipeline {
 public:
  // The owner's side of host slots.
  class HostSlots {
   public:
    // A free slot for a page-out that may wait for one (for deferred
    // releases, dead host chunks, demotion to the spill tier): CUDA_SUCCESS,
    // or an error when none can be had.
    [[nodiscard]] virtual CUresult AcquireWaiting(uint32_t* slot) = 0;
    // `slot` is free once copy-stream sequence `copy_seq` completed (a
    // page-out copy may still be writing it).
    virtual void ReleaseAfter(uint32_t slot, uint64_t copy_seq) = 0;

   protected:
    ~HostSlots() = default;
  };

  // The collaborators (none owned; each outlives the pipeline): the core's
  // transition parts and its side of host slots.
  struct Parts : TransitionParts {
    HostSlots* host_slots = nullptr;
  };

  // REQUIRES: every pointer of `parts` non-null.
  explicit PageOutPipeline(const Parts& parts) : parts_(parts) {}
  PageOutPipeline(const PageOutPipeline&) = delete;
  PageOutPipeline& operator=(const PageOutPipeline&) = delete;

  struct Started {
    // Victims without live data (freed), unmapped and released without a
    // copy: now kUnbacked (stats: drops).
    uint32_t dropped = 0;
    // ... of which belong to a live block (OwnedKind): the owner's count of
    // unbacked owned chunks grows by this.
    uint32_t dropped_owned = 0;
  };
  // Starts the page-out of `victims` in order: a victim without live data is
  // dropped at once (kept, mapped, if its unmap fails); the others get a host
  // slot (from HostSlots::AcquireWaiting() if `may_wait`, else only a free one
  // of the pool) and an enqueued copy, and become `evicting`. Stops at the
  // first victim that gets no slot or whose copy cannot be enqueued (it stays
  // on the device). A copy-stream sequence number issued right after the
  // copies (the stream runs in order) covers every move in flight, so that
  // Finish() does not wait for copies enqueued on it later. REQUIRES: each
  // victim is kDevice, not `evicting`, not pinned, and its last uses
  // completed.
  [[nodiscard]] Started Start(const std::vector<uint32_t>& victims, bool may_wait);

  // The chunk is used again before its page-out finished: the device copy
  // stays authoritative (stats: cancelled_page_outs); its slot is released at
  // Finish(). Clears the chunk's `evicting`.
  void Cancel(uint32_t chunk);
  // Cancel() for every move in flight (the owner's next operation may touch
  // any chunk and cannot wait for the copies: Note [fenced page-outs] in
  // shim_core_hidden_reach.cc).
  void CancelAll();

  struct Finished {
    uint32_t moved = 0;  // chunks now kHost (stats: evictions)
  };
  // Waits for the copies in flight (stats: host_waits; nothing if none), then
  // moves every chunk not cancelled to its host slot, as the failure
  // behaviour above allows. Afterwards nothing is in flight.
  [[nodiscard]] Finished Finish();

  // True if no page-out is in flight.
  bool empty() const { return moves_.empty(); }
  // The copy-stream sequence number that covers every copy in flight
  // (meaningful while !empty()).
  uint64_t copy_seq() const { return copy_seq_; }

 private:
  struct Move {
    uint32_t chunk;
    uint32_t slot;
    bool cancelled;
  };
  const Parts parts_;
  std::vector<Move> moves_;
  uint64_t copy_seq_ = 0;  // covers every copy of moves_
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_PAGE_OUT_PIPELINE_H_

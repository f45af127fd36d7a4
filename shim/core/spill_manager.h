// SpillManager: one ShimCore's use of the spill tier below the host tier
// (Note [spill tier] in shim_core.h), with the spill tier's part of Note
// [failed transitions] there.
//
// Demote() moves host-tier chunks whose last use completed into the tier:
// each chunk's 2 MiB are copied into a staging buffer on the core's copy
// stream, the host waits once for the batch, each buffer is stored, and the
// chunk's host slot is unmapped and freed (residence kNvme, nothing mapped at
// its address). The same steps split in three let the owner wait and store
// without its lock (Note [demotion outside the lock]). Promote() brings a kNvme chunk back: it gets
// a device chunk (else a host slot) from the owner, its stored copy is loaded into a staging buffer
// (or taken from a load started ahead) and copied to that target on the copy stream. Prefetch()
// starts loads of the chunks the policy expects soon and installs finished ones into free host
// slots; Drop() forgets the stored copy of a freed chunk.
//
// Owns: the staging slots' states (free, loading or loaded for a chunk,
// copying, storing), the id of the stored copy of each kNvme chunk and
// their count (spilled_chunks(), copied into CoreStats by the owner), the
// demotion queue (Note [demotion queue]) and the pinning of the staging
// buffers (registered with the driver at construction, unregistered at
// destruction). Not owned, given at construction and outliving the manager:
// the driver; the chunk table (of each chunk it moves it writes residence,
// phys, fill_seq and unmapped, and reads live_data, stamp and
// hidden_target); the physical pool (host slots, mappings); the stream
// tracker and the copy stream's index in it; the policy (asked for its
// prefetch candidates, told OnResident); the core's statistics (host_waits,
// spill_failures, demotions, demotion_scans, promotions,
// promotion_reads, spill_prefetches, page_ins, host_fallbacks); the spill
// tier; and Owner, the core's side: whether a chunk's last uses completed,
// and the acquisition of a promotion's target, which may evict and demote.
// Changes to the owner's other counters are reported in the results instead
// (Demoted, Promote's stored copy).
//
// Failure behaviour (Note [failed transitions]): bytes are never lost.
//   * Demotion: a chunk whose copy into a staging buffer cannot be enqueued
//     stays in host memory, and no later chunk of the batch is started. If
//     the wait for the copies fails, every chunk of the batch stays. A store
//     the tier refuses (no space, failed) keeps the chunk (stats:
//     spill_failures); a failed unmap of its host slot keeps it too, and the
//     stored copy is discarded; so is the stored copy of a chunk used while
//     it was stored (stats: demotions_superseded).
//   * Promotion: without a target, or without a staging buffer, it fails
//     with CUDA_ERROR_OUT_OF_MEMORY; a failed load with
//     CUDA_ERROR_ECC_UNCORRECTABLE (stats: spill_failures); a failed map or
//     copy with the driver's error. In each case the chunk stays kNvme with
//     its stored copy, and the target is released (kept, mapped, if the
//     unmap after a failed copy fails too).
//   * A load started ahead that fails is dropped (the demand path reads
//     again and reports it); one that cannot be installed is kept for the
//     demand path.
//   * A promotion whose load the owner waits for outside its lock
//     (Owner::DeferLoadWait) fails with CUDA_ERROR_NOT_READY: the chunk
//     stays kNvme, the target is released and the load stays in its staging
//     buffer, as one started ahead, for the promotion's repeat. So does one
//     that finds every staging buffer busy and whose wait for one the owner
//     makes outside its lock: for the oldest copy to the device
//     (Owner::DeferCopyWait) or for a load ahead it is to give up
//     (Owner::DeferLoadWait); the repeat takes the buffer.
//
// Note [demotion queue]
//   Demotion victims are host chunks with live data that the operation being
//   prepared does not touch, whose last use completed and whose fill landed,
//   farthest expected next use first: chunks the policy expects soon (its
//   prefetch candidates, soonest first) last, the sooner the later, the
//   others least recently touched first (the stamp is the id of the last
//   operation). Finding them takes a scan of the chunk table and an ordering
//   of the candidates; once per batch of kDemoteBatch (4) chunks that cost
//   O(reservation) per 8 MiB moved, more than the transfer on a large host
//   tier. A scan therefore keeps the best kDemotionQueue (64) candidates in order
//   and later batches take from them, re-checking each one (still eligible,
//   stamp unchanged since the scan: a chunk touched since then is ranked
//   again by the next scan; one that is busy is left to it too). Chunks that
//   entered the host tier after the scan were touched after every queued
//   one, so the exact order would put them later anyway, except against
//   chunks the policy expects soon: the queue is scanned again before one of
//   those is taken, and whenever it runs out. At most one scan per call.
//
// Note [demotion outside the lock]
//   The wait for a batch's staging copies and the stores (NVMe writes over
//   the tier socket, milliseconds each) need none of the owner's state:
//   StartDemotion() picks the victims and enqueues their copies, the owner
//   releases its lock, waits for the copies (an event on the copy stream) and
//   calls StoreDemotion(), and FinishDemotion(), under the lock again, frees
//   the host slots. Meanwhile the chunks stay host-resident and mapped, and
//   other threads may use them: a chunk touched since the start (its stamp
//   changed), moved (residence or slot changed), freed, or possibly written
//   by a launch that names no chunks (the owner's fence count changed) keeps
//   its host slot, and its stored copy is discarded. Its staging slot is
//   kStoring until the finish, so no other demotion or load takes it, and
//   the chunk is not picked by another demotion meanwhile. Demote() runs the
//   three steps under the lock. While batches of other threads hold every
//   staging buffer (or every candidate), StartDemotion() starts none: the
//   owner then waits, without its lock, for one of those batches to finish
//   and runs again (ShimCore::DeferDemotion); a last attempt made under the
//   lock that still finds them all held fails with
//   CUDA_ERROR_OUT_OF_MEMORY, as it would with no candidate at all.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// but StoreDemotion() with its mutex (its member is guarded by it), as it
// does for the collaborators above. StoreDemotion() touches only the tier
// (thread-safe) and the batch it is given. Promote() calls Owner::AcquireDevice() and
// Owner::AcquireHost() before it changes any state of its own; they may call
// Demote() (re-entrantly, on the same thread).
#ifndef MEMVIRT_SHIM_CORE_SPILL_MANAGER_H_
#define MEMVIRT_SHIM_CORE_SPILL_MANAGER_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/core_stats.h"
#include "shim/core/physical_pool.h"
#include "shim/core/residency_policy.h"
#include "shim/core/spill_tier.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/transition_parts.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

class SpillManager {
 public:
  // The owner's side.
  class Owner {
   public:
    // True if every use of `chunk` recorded by the owner has completed.
    virtual bool ChunkIdle(uint32_t chunk) = 0;
    // A device chunk for a promotion; may evict (and so demote): CUDA_SUCCESS,
    // or an error when none can be had.
    [[nodiscard]] virtual CUresult AcquireDevice(uint32_t* index) = 0;
    // A host slot for a promotion the device cannot take; may wait for
    // deferred releases or demote.
    [[nodiscard]] virtual CUresult AcquireHost(uint32_t* slot) = 0;
    // Note [waits outside the lock] in shim_core.h: true if the operation
    // being prepared waits for the tier's load into staging `slot` after
    // releasing the owner's lock (SpillTier::WaitLoad) and then runs again;
    // false if Promote() is to wait for it here.
    virtual bool DeferLoadWait(uint32_t slot) = 0;
    // The same for copy-stream sequence number `copy_seq` (a staging
    // buffer's copy to the device, which a promotion needing that buffer
    // waits for); false if Promote() is to wait for it here.
    virtual bool DeferCopyWait(uint64_t copy_seq) = 0;
    // Launches so far that may write memory they do not name (opaque and
    // fenced launches): Note [demotion outside the lock].
    virtual uint64_t Fences() = 0;

   protected:
    ~Owner() = default;
  };

  // The collaborators (none owned; each outlives the manager): the core's
  // transition parts (the staging copies go on its copy stream), the tier
  // and the owner.
  struct Parts : TransitionParts {
    SpillTier* tier = nullptr;
    Owner* owner = nullptr;
  };

  // Whether `tier` can serve a core over `driver`: it has staging buffers and
  // the driver has asynchronous host copies (logged if not). False for null.
  static bool Usable(const Driver* driver, SpillTier* tier);

  // Pins the staging buffers where the driver can (the tier works, more
  // slowly, without). REQUIRES: every pointer of `parts` non-null;
  // Usable(parts.driver, parts.tier); the chunk table sized.
  explicit SpillManager(const Parts& parts);
  // Unpins the staging buffers. REQUIRES: no copy reads or writes them.
  ~SpillManager();
  SpillManager(const SpillManager&) = delete;
  SpillManager& operator=(const SpillManager&) = delete;

  uint32_t staging_slots() const { return static_cast<uint32_t>(staging_.size()); }
  // Chunks in the spill tier now (kNvme).
  uint32_t spilled_chunks() const { return spilled_; }

  struct Demoted {
    uint32_t moved = 0;  // chunks now kNvme (stats: demotions)
  };
  // Demotes up to `max` (at most one batch) host chunks, farthest expected
  // next use first (Note [demotion queue]); chunks stamped `stamp` (the
  // operation being prepared touches them) and hidden targets are not
  // demoted. Blocks on the copies and the stores.
  [[nodiscard]] Demoted Demote(uint32_t max, uint64_t stamp);

  // Note [demotion outside the lock]: a demotion in three steps.
  struct DemotionBatch {
    struct Move {
      uint32_t chunk;
      uint32_t slot;   // staging slot, kStoring until FinishDemotion()
      uint32_t phys;   // the host slot the chunk had at the start
      uint64_t stamp;  // the chunk's stamp at the start
      // kPending: not stored (the copies were not waited for).
      SpillResult stored = SpillResult::kPending;
      uint64_t id = 0;  // the stored copy when stored == kOk
    };
    std::vector<Move> moves;
    uint64_t copy_seq = 0;  // copy-stream sequence covering the staging copies
    uint64_t fences = 0;    // Owner::Fences() at the start
    bool empty() const { return moves.empty(); }
  };
  // Picks up to `max` victims as Demote() does and enqueues their copies into
  // staging buffers; appends them to *batch (the chunks and slots are then
  // reserved for it). With `may_defer`, a wait for a staging buffer's copy to
  // the device is offered to the owner (Owner::DeferCopyWait): if it takes it,
  // the batch ends there. REQUIRES: FinishDemotion() is called for *batch.
  void StartDemotion(uint32_t max, uint64_t stamp, DemotionBatch* batch, bool may_defer = false);
  // Stores each staged chunk of *batch. REQUIRES: batch->copy_seq is
  // complete; the owner's lock is not needed.
  static void StoreDemotion(SpillTier* tier, DemotionBatch* batch);
  // Frees the host slots of the chunks stored and not used meanwhile, which
  // become kNvme; the others keep their slots. Frees the staging slots.
  [[nodiscard]] Demoted FinishDemotion(const DemotionBatch& batch);

  // Brings kNvme `chunk` back to a device chunk, else a host slot, filled on
  // the copy stream (the chunk's fill_seq). On CUDA_SUCCESS *stored is its
  // stored copy, which the tier keeps until the owner, once the fill is
  // ordered before the work that needs it, calls Discard(), or, if it cannot
  // be, Restore(). CUDA_ERROR_NOT_READY: its load is to be waited for
  // (Owner::DeferLoadWait).
  [[nodiscard]] CUresult Promote(uint32_t chunk, uint64_t* stored);
  // Releases a stored copy Promote() returned.
  void Discard(uint64_t stored) { parts_.tier->Discard(stored); }
  // A promotion of `chunk` is undone, its target released by the owner: it
  // is kNvme again, with its stored copy `stored`.
  void Restore(uint32_t chunk, uint64_t stored);

  // Installs finished loads, then starts loads of spilled chunks the policy
  // expects soon into up to half of the staging buffers (never waits).
  void Prefetch();

  // Freed kNvme `chunk`: its stored copy is discarded; it becomes kUnbacked.
  void Drop(uint32_t chunk);

 private:
  struct StagingSlot {
    // kStoring: held by a demotion until its store returned.
    enum class State : uint8_t { kFree, kLoading, kLoaded, kCopying, kStoring };
    State state = State::kFree;
    uint32_t chunk = kNoIndex;  // kLoading/kLoaded: the chunk being promoted; kStoring: demoted
    uint64_t id = 0;            // kLoading/kLoaded: its stored copy
    uint64_t copy_seq = 0;      // kCopying: copy-stream sequence reading the slot
  };
  // Note [demotion queue].
  struct DemotionCandidate {
    uint32_t rank;  // > 0: among the policy's upcoming chunks (higher: needed sooner)
    uint32_t chunk;
    uint64_t stamp;  // the chunk's stamp when queued
  };

  void SetSpillId(uint32_t chunk, uint64_t id);
  // Finishes the load running into staging `slot` (*res: its outcome). With
  // `may_defer`, a poll first; if the load still runs, the owner may take
  // the wait (Owner::DeferLoadWait): true, *res is kPending and the load
  // stays. Otherwise it is waited for here.
  bool FinishLoadOrDefer(uint32_t slot, bool may_defer, SpillResult* res);
  // A staging slot usable now (free, or its copy completed), without waiting.
  bool ReadyStaging(uint32_t* slot);
  // A staging slot for a demotion or for the promotion of `keep_chunk`:
  // ready, else the oldest slot whose copy to the device runs, after that
  // copy, else one a load ahead holds (given up, after its load).
  // CUDA_ERROR_OUT_OF_MEMORY when none can be had; with `may_defer`,
  // CUDA_ERROR_NOT_READY when the owner defers the wait (Owner::DeferCopyWait,
  // Owner::DeferLoadWait).
  [[nodiscard]] CUresult AcquireStaging(uint32_t keep_chunk, bool may_defer, uint32_t* slot);
  bool DemotionEligible(uint32_t chunk, uint64_t stamp);
  // True if a demotion holds `chunk` (its staging slot is kStoring).
  bool Demoting(uint32_t chunk) const;
  // FinishDemotion()'s step for one stored move: true if the chunk is kNvme now.
  bool CommitDemotion(const DemotionBatch::Move& m, bool unchanged_fences, Demoted* demoted);
  void RebuildDemotionQueue(uint64_t stamp);
  // Installs finished prefetch loads into free host slots (never waits).
  void InstallLoaded();

  ChunkTable& table() { return *parts_.table; }
  PhysicalPool& pool() { return *parts_.pool; }
  StreamTracker& tracker() { return *parts_.tracker; }
  ResidencyPolicy& policy() { return *parts_.policy; }
  CoreStats& stats() { return *parts_.stats; }
  SpillTier& tier() { return *parts_.tier; }

  const Parts parts_;
  std::vector<StagingSlot> staging_;
  // Per materialized chunk, kNvme only; grown by SetSpillId (reads are of
  // chunks written before).
  std::vector<uint64_t> spill_ids_;
  uint32_t staging_loads_ = 0;  // slots kLoading or kLoaded
  uint32_t spilled_ = 0;        // kNvme chunks
  bool spill_full_logged_ = false;
  std::vector<DemotionCandidate> demotion_queue_;  // best victim last
  std::vector<uint32_t> prefetch_;                 // Prefetch()'s candidates (reused buffer)
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_SPILL_MANAGER_H_

// FillBatch: the page-ins ("fills") of the operation being prepared, each
// with its chunk's previous home kept until the operation is ordered after
// them (Note [failed transitions] in shim_core.h).
//
// A fill is either from a host slot (FillFromHost: the chunk remapped to a
// device chunk and its 2 MiB copied from the slot on the copy stream) or a
// promotion from the spill tier (SpillManager::Promote, its stored copy
// kept). Mark() gives the host fills one copy-stream sequence number, their
// chunks' fill_seq. Then either
//   * Commit(copy_seq): the operation is ordered after the fills; each
//     source slot goes back to the pool once `copy_seq` completed (the copy
//     may still read it), each stored copy is discarded; or
//   * Undo(): the fills cannot be ordered; every chunk goes back where its
//     bytes are (its host slot, mapped again, or the spill tier), and the
//     device chunks taken are released.
// Order() waits for the fills an operation needs and then does one or the
// other.
// MapHostSlot() is the one way a host slot is mapped back at its chunk's
// address: a failure marks the chunk `unmapped` (mapped at its next use).
//
// Owns: the fills. Not owned, given at construction and outliving it: the
// transition parts' chunk table (residence, phys, fill_seq, unmapped
// written), physical pool (unmaps, maps, releases), driver (the fill
// copies, the waits of Order()), stream tracker with the copy stream (a
// sequence number issued), policy (told OnResident on a fill, OnEvicted on
// undo) and statistics (page_ins, host_waits); the host slot releases; the spill manager (null
// without a spill tier: then no promotion is ever added).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it).
#ifndef MEMVIRT_SHIM_CORE_FILL_BATCH_H_
#define MEMVIRT_SHIM_CORE_FILL_BATCH_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/core/host_slot_releases.h"
#include "shim/core/spill_manager.h"
#include "shim/core/transition_parts.h"

namespace memvirt::shim {

class FillBatch {
 public:
  // REQUIRES: parts.table, parts.pool, parts.tracker and parts.policy
  // non-null; `releases` non-null.
  FillBatch(const TransitionParts& parts, HostSlotReleases* releases, SpillManager* spill)
      : parts_(parts), releases_(releases), spill_(spill) {}
  FillBatch(const FillBatch&) = delete;
  FillBatch& operator=(const FillBatch&) = delete;

  // Forgets the fills (a new operation). REQUIRES: those added were
  // committed or undone.
  void Clear() { fills_.clear(); }
  size_t size() const { return fills_.size(); }

  // Moves kHost `chunk` onto device chunk `dev` and adds the fill: unmaps
  // its slot (unless `unmapped`), maps `dev` at its address, enqueues the
  // copy of its bytes from the slot (if it has live data) on the copy
  // stream; the chunk is then kDevice on `dev` (stats: page_ins; the policy
  // told OnResident). On failure (Note [failed transitions]) the error is
  // returned with the chunk still kHost in its slot, the slot mapped at its
  // address again (a failed map marks it `unmapped`), and `dev` released (or
  // abandoned if it cannot be unmapped). REQUIRES: `chunk` is kHost and its
  // last uses completed; `dev` is acquired and mapped nowhere.
  [[nodiscard]] CUresult FillFromHost(uint32_t chunk, uint32_t dev);
  // `chunk` was promoted from the spill tier; `stored` is its stored copy.
  // REQUIRES: a spill manager was given.
  void AddPromotion(uint32_t chunk, uint64_t stored) {
    fills_.push_back({chunk, kNoIndex, stored});
  }

  // Issues one copy-stream sequence number covering the host fills and sets
  // it as their chunks' fill_seq; returns it, or 0 if there is none.
  uint64_t Mark();
  // The operation is ordered after the fills (see above); forgets them.
  void Commit(uint64_t copy_seq);
  // Every chunk back to its previous home, newest fill first; forgets them.
  void Undo();
  // Orders the work next enqueued on tracked stream `stream` after
  // copy-stream sequence `need` (0: nothing to wait for): with a
  // stream-ordered wait, or on the host if `host_wait` (stats: host_waits);
  // a stream-ordered wait that cannot be enqueued becomes a host wait. Then
  // Commit(), or, if `need` cannot be waited for, Undo() and the error.
  // Callers that must not wait with their lock held defer the host wait
  // first (Note [waits outside the lock] in shim_core.h).
  [[nodiscard]] CUresult Order(uint64_t need, uint32_t stream, bool host_wait);

  // Maps kHost `chunk`'s slot at its address; on failure marks the chunk
  // `unmapped` (and clears the mark on success).
  [[nodiscard]] CUresult MapHostSlot(uint32_t chunk);

 private:
  struct Fill {
    uint32_t chunk;
    uint32_t host_slot;  // kNoIndex: promoted from the spill tier
    uint64_t spill_id;   // promoted: its stored copy
  };

  void AddHostFill(uint32_t chunk, uint32_t slot) { fills_.push_back({chunk, slot, 0}); }
  // FillFromHost's rollback once `dev` is mapped at `chunk`'s address.
  void ReturnToSlot(uint32_t chunk, uint32_t dev);

  const TransitionParts parts_;
  HostSlotReleases* const releases_;
  SpillManager* const spill_;
  std::vector<Fill> fills_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_FILL_BATCH_H_

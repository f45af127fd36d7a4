// HostSlotReleases: host slots that a copy on the core's copy stream may
// still read or write (the source of a page-in, the target of a cancelled or
// failed page-out), given back to the pool once that copy completed.
//
// Owns: the slots waiting. Not owned, given at construction and outliving
// it: the physical pool (slots released) and the stream tracker with the
// copy stream's index in it (asked).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it).
#ifndef MEMVIRT_SHIM_CORE_HOST_SLOT_RELEASES_H_
#define MEMVIRT_SHIM_CORE_HOST_SLOT_RELEASES_H_

#include <cstdint>
#include <vector>

#include "shim/core/physical_pool.h"
#include "shim/core/stream_tracker.h"

namespace memvirt::shim {

class HostSlotReleases {
 public:
  // REQUIRES: `pool` and `tracker` non-null; `copy_index` is the copy
  // stream's index in `tracker`.
  HostSlotReleases(PhysicalPool* pool, StreamTracker* tracker, uint32_t copy_index)
      : pool_(pool), tracker_(tracker), copy_index_(copy_index) {}
  HostSlotReleases(const HostSlotReleases&) = delete;
  HostSlotReleases& operator=(const HostSlotReleases&) = delete;

  // `slot` goes back to the pool once copy-stream sequence `copy_seq`
  // completed.
  void Add(uint32_t slot, uint64_t copy_seq) { waiting_.push_back({slot, copy_seq}); }
  // Gives back the slots whose copies are known complete (a poll; no wait).
  void ReleaseCompleted() {
    size_t k = 0;
    for (const Waiting& w : waiting_) {
      if (tracker_->IsComplete(copy_index_, w.copy_seq)) {
        pool_->ReleaseHost(w.slot);
      } else {
        waiting_[k++] = w;
      }
    }
    waiting_.resize(k);
  }
  bool empty() const { return waiting_.empty(); }
  // The copy-stream sequence the last added slot waits for: once it
  // completed, ReleaseCompleted() gives back at least that slot.
  // REQUIRES: !empty().
  uint64_t last_copy_seq() const { return waiting_.back().copy_seq; }

 private:
  struct Waiting {
    uint32_t slot;
    uint64_t copy_seq;
  };

  PhysicalPool* const pool_;
  StreamTracker* const tracker_;
  const uint32_t copy_index_;
  std::vector<Waiting> waiting_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_HOST_SLOT_RELEASES_H_

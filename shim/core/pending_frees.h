// PendingFrees: blocks the application freed while device work may still use
// them (Note [pending frees]).
//
// Note [pending frees]
//   The driver's cuMemFree waits for the device before the memory can be
//   reused, and cuMemFreeAsync frees in stream order; the shim returns at
//   once from both, so an address is handed out again only once the work
//   that may still use the freed block completed: for cuMemFree of a large
//   block, every use of each of its chunks (its chunk uses); for
//   cuMemFreeAsync, the work issued on the freeing stream until the call.
//   (Small blocks share a slab chunk with others and are freed at once, as
//   with the driver once the application synchronized.) Until then the
//   block is pending: no allocation to the application any more (pointer
//   queries fail, a second free is an error), not yet free in the
//   allocator. Entries are released by polls (ReleaseCompleted: every
//   operation polls); an allocation that finds the address space full waits
//   for them (without the core lock, Note [waits outside the lock] in
//   shim_core.h, through CollectWaits; or, as a last attempt, WaitAll). The
//   list is bounded in practice: past kCoverAfter entries each new
//   cuMemFreeAsync entry gets an event on its stream at once, so that a
//   later poll can see it complete.
//
// Owns: the entries. Not owned, given at construction and outliving it: the
// chunk table (read), the chunk uses (asked and waited for) and the stream
// tracker (asked, waited for, covered).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it).
#ifndef MEMVIRT_SHIM_CORE_PENDING_FREES_H_
#define MEMVIRT_SHIM_CORE_PENDING_FREES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/chunk_uses.h"
#include "shim/core/stream_tracker.h"

namespace memvirt::shim {

class PendingFrees {
 public:
  static constexpr size_t kCoverAfter = 256;

  // REQUIRES: every argument non-null.
  PendingFrees(const ChunkTable* table, ChunkUses* uses, StreamTracker* tracker)
      : table_(table), uses_(uses), tracker_(tracker) {}
  PendingFrees(const PendingFrees&) = delete;
  PendingFrees& operator=(const PendingFrees&) = delete;

  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // True if the block at reservation offset `offset` is pending.
  bool Contains(uint64_t offset) const;

  // True if every chunk of the block holding reservation offset `offset`
  // is idle (a poll; no wait).
  bool BlockIdle(uint64_t offset);
  // cuMemFree of the large block at `offset`: pending until BlockIdle().
  void AddUntilIdle(uint64_t offset);
  // cuMemFreeAsync of the block at `offset`: pending until work `seq` on
  // tracked stream `stream` completed.
  void AddAfter(uint64_t offset, uint32_t stream, uint64_t seq);

  // Calls free(offset) for each entry whose work is known complete (a
  // poll) and forgets it. `free` must not call back into this object.
  template <typename Free>
  void ReleaseCompleted(Free free) {
    size_t k = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      const Entry e = entries_[i];
      if (Complete(e)) {
        free(e.offset);
      } else {
        entries_[k++] = e;
      }
    }
    entries_.resize(k);
  }
  // Appends to `waits` the work the entries wait for that is not known
  // complete; true if it appended any.
  bool CollectWaits(std::vector<StreamUse>* waits);
  // Waits on the host for the work of every entry (with the owner's lock
  // held: a last attempt). Returns the number of host waits made. A failed
  // wait leaves its entry pending.
  uint32_t WaitAll();

 private:
  struct Entry {
    uint64_t offset;
    uint32_t stream;  // kNoIndex: until the block's chunks are idle
    uint64_t seq;
  };
  bool Complete(const Entry& e) {
    return e.stream == kNoIndex ? BlockIdle(e.offset) : tracker_->IsComplete(e.stream, e.seq);
  }

  const ChunkTable* const table_;
  ChunkUses* const uses_;
  StreamTracker* const tracker_;
  std::vector<Entry> entries_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_PENDING_FREES_H_

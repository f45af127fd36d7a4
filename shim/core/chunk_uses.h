// ChunkUses: which device work may still read or write each chunk, so that
// nothing is copied out, remapped or released under it (Note [chunk uses]).
//
// Note [chunk uses]
//   A chunk is idle when three kinds of work have completed:
//   * its last fill: the page-in copy on the core's copy stream (the entry's
//     fill_seq; 0 when none is pending);
//   * its last use on each stream: a launch or copy that names it records
//     (stream, seq) in the entry's uses[], one slot per stream, the newest
//     seq replacing the older one. When more than kMaxUses streams have
//     work on it, the completed uses are dropped first; if none completed,
//     the entry overflows (use_overflow) and is idle only once every stream
//     has drained everything issued when it is checked: conservative, never
//     early;
//   * every fence: a launch that may reach any chunk (opaque, or with hidden
//     reach, Note [hidden reach] in shim_core_hidden_reach.cc) is a use of
//     every chunk until it completes. One fence per stream is kept, the
//     newest (a stream runs in order).
//   Completion is the tracker's (Note [completion is CUDA_SUCCESS] in
//   stream_tracker.h): work whose event query failed is never idle.
//
// Owns: the fences and their count. Not owned, given at construction and
// outliving it: the chunk table (each entry's uses, num_uses and
// use_overflow are written here; fill_seq is read) and the stream tracker,
// with the copy stream's index in it.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex, as for the table and the tracker.
#ifndef MEMVIRT_SHIM_CORE_CHUNK_USES_H_
#define MEMVIRT_SHIM_CORE_CHUNK_USES_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/stream_tracker.h"

namespace memvirt::shim {

class ChunkUses {
 public:
  // REQUIRES: `table` and `tracker` non-null; `copy_index` is the copy
  // stream's index in `tracker`.
  ChunkUses(ChunkTable* table, StreamTracker* tracker, uint32_t copy_index)
      : table_(table), tracker_(tracker), copy_index_(copy_index) {}
  ChunkUses(const ChunkUses&) = delete;
  ChunkUses& operator=(const ChunkUses&) = delete;

  // Work `seq` on `stream` uses `chunk` (every launch and copy: inline).
  void Add(uint32_t chunk, uint32_t stream, uint64_t seq) {
    ChunkEntry& e = (*table_)[chunk];
    for (int i = 0; i < e.num_uses; ++i) {
      if (e.uses[i].stream == stream) {
        e.uses[i].seq = seq;
        return;
      }
    }
    if (e.num_uses == kMaxUses) DropCompleted(&e);
    if (e.num_uses < kMaxUses) {
      e.uses[e.num_uses++] = {stream, seq};
    } else {
      e.use_overflow = true;
    }
  }

  // Work `seq` on `stream` uses every chunk until it completes.
  void AddFence(uint32_t stream, uint64_t seq);
  // AddFence() calls so far: a change means that work which may have
  // written any chunk was enqueued in between.
  uint64_t fences() const { return fences_; }
  // Forgets the fences known complete (a poll; no wait). Inline: every
  // operation calls it, and there is usually no fence.
  void DropCompletedFences() {
    if (!fences_by_stream_.empty()) DropCompletedFencesSlow();
  }

  // True if every use of `chunk` is known complete (polls; no wait). Clears
  // the chunk's uses when they are.
  bool Idle(uint32_t chunk);
  // Blocks on the host until every use of `chunk` completed (with the core
  // lock held: a last attempt, Note [waits outside the lock] in
  // shim_core.h). An error if a wait failed; the chunk may still be in use
  // then, and its uses are kept.
  [[nodiscard]] CUresult WaitIdle(uint32_t chunk);
  // True if every use of `chunk` not known complete, fences included, is
  // work on `stream` (or its fill, on the copy stream): work that runs
  // before the next operation on `stream` anyway (Note [eviction] in
  // shim_core.h). False when its uses overflowed.
  bool PendingOnlyOn(uint32_t chunk, uint32_t stream);
  // Appends to `pending` each use of `chunk` not known complete, as
  // (stream, seq) to wait for; returns how many it appended.
  size_t CollectPending(uint32_t chunk, std::vector<StreamUse>* pending);

 private:
  void DropCompleted(ChunkEntry* e);
  void DropCompletedFencesSlow();

  ChunkTable* const table_;
  StreamTracker* const tracker_;
  const uint32_t copy_index_;
  std::vector<StreamUse> fences_by_stream_;  // the newest fence of each stream
  uint64_t fences_ = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CHUNK_USES_H_

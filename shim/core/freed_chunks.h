// FreedChunks: chunks of freed blocks that still hold backing (a device
// chunk or a host slot), and the release of that backing (Note [freed
// chunks]).
//
// Note [freed chunks]
//   A freed device chunk stays mapped at its address: an allocation that
//   reuses the address (the allocator's warm reuse) finds it resident, with
//   no page-in and no remap. Such chunks are listed here once (the entry's
//   dead_listed) and released one at a time when room is needed, before any
//   live chunk is evicted (ReclaimOne), each only once no work uses it, no
//   page-out copy reads it and no export holds it. A freed chunk's host slot
//   goes back to the host budget at once instead, once no work uses it
//   (ReleaseHostSlots): the budget is the process's (Note [shared host
//   budget] in host_ledger.h), and a slot kept by the core that freed it is
//   one the other cores' page-outs cannot have, although admission (Note
//   [shared admission] in overflow_ledger.h) already counts its capacity as
//   free. A slot still in use waits in the list like a device chunk. A
//   chunk whose address is reused (its kind is a block's again) or already
//   released leaves the list at the next scan. A released chunk is
//   kUnbacked: an allocation at its address is backed afresh, with no copy
//   of stale bytes; a failed unmap leaves it listed, tried again later.
//
// Owns: the list. Not owned, given at construction and outliving it: the
// transition parts' chunk table (residence, phys, unmapped and dead_listed
// written), physical pool (unmaps, device chunks and host slots released),
// policy (told OnEvicted) and statistics (drops); the chunk uses (asked
// whether a chunk is idle).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it).
#ifndef MEMVIRT_SHIM_CORE_FREED_CHUNKS_H_
#define MEMVIRT_SHIM_CORE_FREED_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "shim/core/chunk_uses.h"
#include "shim/core/transition_parts.h"

namespace memvirt::shim {

class FreedChunks {
 public:
  // REQUIRES: parts.table, parts.pool, parts.policy, parts.stats and `uses`
  // non-null.
  FreedChunks(const TransitionParts& parts, ChunkUses* uses) : parts_(parts), uses_(uses) {}
  FreedChunks(const FreedChunks&) = delete;
  FreedChunks& operator=(const FreedChunks&) = delete;

  // What a release did.
  struct Released {
    uint32_t chunks = 0;  // chunks made kUnbacked
  };

  // The block's chunk `chunk` was freed with backing (kDevice or kHost):
  // listed unless it is already.
  void Add(uint32_t chunk);
  // Releases at most one listed chunk that is on the device (`device`) or in
  // a host slot (`host`) and may be released now.
  Released ReclaimOne(bool device, bool host);
  // Releases the host slots of the freed chunks first..first+count-1 that
  // no work uses (Note [freed chunks]); the others stay as they are.
  Released ReleaseHostSlots(uint32_t first, uint32_t count);

  size_t size() const { return list_.size(); }

 private:
  // Unmaps `chunk` (unless nothing is mapped) and releases its backing;
  // false, with nothing changed, if the unmap failed.
  bool Release(uint32_t chunk, Released* released);

  const TransitionParts parts_;
  ChunkUses* const uses_;
  std::vector<uint32_t> list_;  // freed chunks still backed, each once
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_FREED_CHUNKS_H_

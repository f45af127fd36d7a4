// DeferredWaits: what one operation run with its waits deferred (Note [waits
// outside the lock] in shim_core.h) must wait for before it runs again.
// Collected under the core's mutex while the operation runs; taken whole
// (Take) by the thread that then waits without the mutex, or dropped when
// the operation found a way that needs no wait.
//
// Thread safety: a plain value; the owner (ShimCore) guards its member with
// its mutex. A taken value belongs to the thread that took it.
#ifndef MEMVIRT_SHIM_CORE_DEFERRED_WAITS_H_
#define MEMVIRT_SHIM_CORE_DEFERRED_WAITS_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/spill_manager.h"

namespace memvirt::shim {

struct DeferredWaits {
  // Work to complete: (stream, seq) of each.
  std::vector<StreamUse> uses;
  // Staging slots of spill-tier loads to complete.
  std::vector<uint32_t> loads;
  // A demotion whose copy wait and stores are made without the mutex (Note
  // [demotion outside the lock] in spill_manager.h). REQUIRES: finished
  // (SpillManager::FinishDemotion) by whoever holds it last.
  SpillManager::DemotionBatch demotion;
  // Host slots to ask the other cores for (Note [host slots of other cores]
  // in host_peers.h); 0: none.
  uint32_t host_chunks = 0;
  // The other cores' completed frees are to be settled (Note [frees of
  // other cores] in host_peers.h).
  bool peer_frees = false;
  // Another thread's demotion batches hold what a demotion needs: the count
  // of finished batches seen, to wait to change.
  std::optional<uint64_t> demotion_wait;

  // True if the operation deferred any wait.
  bool any() const {
    return !uses.empty() || !loads.empty() || host_chunks != 0 || peer_frees || !demotion.empty() ||
           demotion_wait.has_value();
  }
  // Everything, leaving this empty.
  DeferredWaits Take() { return std::exchange(*this, DeferredWaits{}); }
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_DEFERRED_WAITS_H_

// VictimPicker: which device chunks an eviction pages out, in the policy's
// order, under the candidate rule of Note [eviction] (shim_core.h).
//
// A candidate is device-resident, not used by the operation being prepared
// (not in the touch set), not pinned for an export (Note [pinned blocks] in
// shim_core_pin.cc), not already moving (its page-out in flight), and idle:
// every use of it known complete, or, when the eviction serves an operation
// enqueued on a stream, pending only on that stream (work the operation
// runs after anyway). PickIdle() takes candidates only; PickInUse() drops
// the idleness requirement, for the one victim an eviction waits for when
// nothing is idle.
//
// Owns nothing but the rule's parameters during a call. Not owned, given at
// construction and outliving the picker: the chunk table (residence, pinned
// and evicting read; `picked` set on each chunk while one PickIdle() call
// chooses, so that the policy does not offer it twice, and cleared before
// the call returns), the chunk uses (asked, and cleared when complete, by
// ChunkUses::Idle), the policy (asked PickVictim) and the touch set.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it), as for the collaborators.
#ifndef MEMVIRT_SHIM_CORE_VICTIM_PICKER_H_
#define MEMVIRT_SHIM_CORE_VICTIM_PICKER_H_

#include <cstdint>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/chunk_uses.h"
#include "shim/core/residency_policy.h"
#include "shim/core/touch_set.h"

namespace memvirt::shim {

class VictimPicker {
 public:
  // REQUIRES: every argument non-null.
  VictimPicker(ChunkTable* table, ChunkUses* uses, ResidencyPolicy* policy, const TouchSet* touch)
      : table_(table), uses_(uses), policy_(policy), touch_(touch) {}
  VictimPicker(const VictimPicker&) = delete;
  VictimPicker& operator=(const VictimPicker&) = delete;

  // Appends to `victims` up to `want` candidates, each once, in the
  // policy's order. `stream` is the stream index of the operation the
  // eviction makes room for, or kNoIndex (idle chunks only: look-ahead
  // page-outs, budget changes, captured operations).
  // REQUIRES: `victims` non-null; no chunk in it is a candidate (the
  // caller's earlier picks were evicted or are in use).
  void PickIdle(uint32_t want, uint32_t stream, std::vector<uint32_t>* victims);
  // The policy's first chunk that would be a candidate if it were idle;
  // false if there is none.
  bool PickInUse(uint32_t* victim);

 private:
  static bool Eligible(void* self, uint32_t chunk);

  ChunkTable* const table_;
  ChunkUses* const uses_;
  ResidencyPolicy* const policy_;
  const TouchSet* const touch_;
  // The rule of the call in progress.
  bool idle_only_ = true;
  uint32_t stream_ = kNoIndex;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_VICTIM_PICKER_H_

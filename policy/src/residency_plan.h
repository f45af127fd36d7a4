// ResidencyPlan: which gaps between consecutive uses of a block the MIN
// replacement rule spends off the device, for a cyclic schedule and a budget.
//
// Thread safety: immutable after construction.
//
// Note [residency plan]
//   Near the memory limit, choosing victims by farthest next use *at the
//   time of an early decision* (evict ahead, make room for a prefetch) picks
//   blocks that MIN, deciding at the time of need, would keep: blocks born in
//   between (forward activations used again in backward) are better victims
//   but do not exist yet. Each such choice is a write back and a fetch MIN
//   does not make. So the lifetime planner separates *which* data leaves the
//   device from *when*: MIN, run offline on the learned iteration (demand
//   paging, farthest next use, data dead after its last read dropped), marks
//   every gap between two uses of a block as kept or off. The planner then
//   evicts only blocks in off gaps, as soon as their last use before the gap
//   is done (the write back overlaps compute and frees memory early), and
//   prefetches them back within its lookahead window. The traffic is MIN's;
//   the timing is the planner's. Gaps are those of the steady state: MIN
//   runs over kCycles iterations from an empty device and the last one is
//   recorded. Cost: O(kCycles x accesses of the iteration x log(blocks)) time
//   and one byte per access, paid when an iteration is learned and at every
//   budget change (Planner::SetBudget re-plans and re-ranks every block).

#ifndef MEMVIRT_POLICY_SRC_RESIDENCY_PLAN_H_
#define MEMVIRT_POLICY_SRC_RESIDENCY_PLAN_H_

#include <cstdint>
#include <span>
#include <vector>

#include "schedule.h"

namespace memvirt::policy::internal {

class ResidencyPlan {
 public:
  ResidencyPlan() = default;
  // `bytes`: device bytes of each schedule block, by dense index (0 for one
  // never allocated: it takes no memory). An empty plan if budget == 0.
  ResidencyPlan(const Schedule& schedule, std::span<const uint64_t> bytes, uint64_t budget);

  bool empty() const { return off_.empty(); }
  // True if MIN has block `dense` off the device in the gap that ends at its
  // use number `use_index` (the gap before use 0 starts at the previous
  // iteration's last use). REQUIRES: !empty(), valid indices.
  bool OffBefore(uint32_t dense, uint32_t use_index) const {
    return off_[offset_[dense] + use_index] != 0;
  }

 private:
  static constexpr int kCycles = 3;
  std::vector<uint64_t> offset_;  // by dense index: its first entry in off_
  std::vector<uint8_t> off_;
};

}  // namespace memvirt::policy::internal

#endif  // MEMVIRT_POLICY_SRC_RESIDENCY_PLAN_H_

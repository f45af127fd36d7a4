// Demotion and promotion planning between the host tier and the NVMe tier.
//
// Pure functions: no I/O, no clock, no locks; the daemon feeds them its view of the slabs (the
// next-use estimate comes from the policy's plan and the clients' hints) and executes the plan
// with SwapStore. Next uses are in the daemon's logical time (e.g. the policy's step counter);
// kNeverUsed marks a slab with no predicted use.
//
// Thread safety: pure, reentrant.
#ifndef MEMVIRT_NVME_DEMOTION_PLANNER_H_
#define MEMVIRT_NVME_DEMOTION_PLANNER_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/types/span.h"

namespace memvirt::nvme {

inline constexpr uint64_t kNeverUsed = std::numeric_limits<uint64_t>::max();

struct SlabUse {
  uint64_t key = 0;  // the daemon's slab key, returned in plans
  uint64_t bytes = 0;
  uint64_t next_use = kNeverUsed;
  bool pinned = false;  // in use or under I/O: must not move now
};

struct DemotionPlan {
  std::vector<uint64_t> demote;  // keys, farthest next use first
  uint64_t bytes = 0;            // total bytes of `demote`
  // Bytes still above the host budget after the plan (pinned slabs or no NVMe space).
  uint64_t shortfall = 0;
};

// Picks host slabs to demote so that host usage (the sum of host_slabs' bytes) drops to at most
// host_budget_bytes, taking slabs with the farthest next use first (Belady's rule; ties: larger
// slab first, then lower key) and never more than nvme_free_bytes in total. Pinned slabs are
// never chosen. Nothing is chosen when usage is within budget.
DemotionPlan PlanDemotions(absl::Span<const SlabUse> host_slabs, uint64_t host_budget_bytes,
                           uint64_t nvme_free_bytes);

struct PromotionPlan {
  std::vector<uint64_t> promote;  // keys, soonest next use first
  uint64_t bytes = 0;
};

// Picks NVMe slabs to prefetch into the host tier: those whose next use is at most
// `now + horizon`, soonest first, while they fit in host_free_bytes. Pinned slabs and slabs
// with no predicted use are skipped. A slab that does not fit stops the plan (a later slab is
// not promoted ahead of an earlier need).
PromotionPlan PlanPromotions(absl::Span<const SlabUse> nvme_slabs, uint64_t now, uint64_t horizon,
                             uint64_t host_free_bytes);

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_DEMOTION_PLANNER_H_

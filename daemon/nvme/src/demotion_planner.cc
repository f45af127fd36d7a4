#include "memvirt/nvme/demotion_planner.h"

#include <algorithm>
#include <tuple>

namespace memvirt::nvme {

DemotionPlan PlanDemotions(absl::Span<const SlabUse> host_slabs, uint64_t host_budget_bytes,
                           uint64_t nvme_free_bytes) {
  DemotionPlan plan;
  uint64_t used = 0;
  for (const SlabUse& s : host_slabs) used += s.bytes;
  if (used <= host_budget_bytes) return plan;
  uint64_t excess = used - host_budget_bytes;

  std::vector<const SlabUse*> candidates;
  for (const SlabUse& s : host_slabs) {
    if (!s.pinned && s.bytes > 0) candidates.push_back(&s);
  }
  std::sort(candidates.begin(), candidates.end(), [](const SlabUse* a, const SlabUse* b) {
    return std::make_tuple(a->next_use, a->bytes, b->key) >
           std::make_tuple(b->next_use, b->bytes, a->key);
  });
  for (const SlabUse* s : candidates) {
    if (excess == 0) break;
    if (s->bytes > nvme_free_bytes) continue;  // a smaller, nearer slab may still fit
    plan.demote.push_back(s->key);
    plan.bytes += s->bytes;
    nvme_free_bytes -= s->bytes;
    excess -= std::min(excess, s->bytes);
  }
  plan.shortfall = excess;
  return plan;
}

PromotionPlan PlanPromotions(absl::Span<const SlabUse> nvme_slabs, uint64_t now, uint64_t horizon,
                             uint64_t host_free_bytes) {
  PromotionPlan plan;
  const uint64_t limit = horizon > kNeverUsed - 1 - now ? kNeverUsed - 1 : now + horizon;
  std::vector<const SlabUse*> candidates;
  for (const SlabUse& s : nvme_slabs) {
    if (!s.pinned && s.next_use != kNeverUsed && s.next_use <= limit) candidates.push_back(&s);
  }
  std::sort(candidates.begin(), candidates.end(), [](const SlabUse* a, const SlabUse* b) {
    return std::tie(a->next_use, a->key) < std::tie(b->next_use, b->key);
  });
  for (const SlabUse* s : candidates) {
    if (s->bytes > host_free_bytes) break;
    plan.promote.push_back(s->key);
    plan.bytes += s->bytes;
    host_free_bytes -= s->bytes;
  }
  return plan;
}

}  // namespace memvirt::nvme

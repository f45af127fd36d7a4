#include "residency_plan.h"

#include <set>
#include <utility>

namespace memvirt::policy::internal {

ResidencyPlan::ResidencyPlan(const Schedule& schedule, std::span<const uint64_t> bytes,
                             uint64_t budget) {
  const uint64_t n = schedule.size();
  const uint32_t num_blocks = schedule.num_blocks();
  if (n == 0 || budget == 0) return;
  offset_.resize(num_blocks + 1, 0);
  for (uint32_t d = 0; d < num_blocks; ++d)
    offset_[d + 1] = offset_[d] + schedule.uses_of_dense(d).positions.size();
  off_.assign(offset_[num_blocks], 0);

  std::vector<uint8_t> resident(num_blocks, 0);
  std::vector<uint64_t> next_use(num_blocks, 0);
  std::vector<uint32_t> cursor(num_blocks, 0);        // index of the block's next use
  std::set<std::pair<uint64_t, uint32_t>> evictable;  // resident, not in the step
  uint64_t used = 0;
  for (int c = 0; c < kCycles; ++c) {
    std::fill(cursor.begin(), cursor.end(), 0);
    const bool record = c + 1 == kCycles;
    for (uint64_t p = 0; p < n; ++p) {
      const std::vector<StepUse>& uses = schedule.uses_at(p, /*cyclic=*/true);
      for (const StepUse& u : uses) {
        if (resident[u.dense]) evictable.erase({next_use[u.dense], u.dense});
      }
      for (const StepUse& u : uses) {
        if (resident[u.dense]) continue;
        if (record) off_[offset_[u.dense] + cursor[u.dense]] = 1;
        resident[u.dense] = 1;
        used += bytes[u.dense];
      }
      // Demand: the farthest next use leaves (the step's own blocks stay).
      while (used > budget && !evictable.empty()) {
        auto last = std::prev(evictable.end());
        resident[last->second] = 0;
        used -= bytes[last->second];
        evictable.erase(last);
      }
      for (const StepUse& u : uses) {
        const BlockUses& all = schedule.uses_of_dense(u.dense);
        const uint32_t i = cursor[u.dense]++;
        if (u.dead_after) {  // MIN drops dead data first, at no cost
          resident[u.dense] = 0;
          used -= bytes[u.dense];
          continue;
        }
        const uint64_t base = static_cast<uint64_t>(c) * n;
        next_use[u.dense] = i + 1 < all.positions.size() ? base + all.positions[i + 1]
                                                         : base + n + all.positions[0];
        evictable.insert({next_use[u.dense], u.dense});
      }
    }
  }
}

}  // namespace memvirt::policy::internal

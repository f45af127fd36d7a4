// Arbiter: divides one memory pool (a GPU's HBM or the host tier) among processes.
//
// A pure function: no state, no locks, no I/O; safe to call from any thread.
//
// Note [max-min fair budgets]
// Every claim has a floor (min_bytes) and a cap (the smaller of its demand and its operator
// quota; 0 means "no limit"). When the floors fit, each claim first gets its floor and the rest
// of the capacity is water-filled: all budgets rise together to a common level L, each clamped
// to [floor, cap], with L as large as the capacity allows. Equal claims therefore get equal
// shares, a small claim keeps all it asks for, and a newcomer takes its share from the largest
// budgets first. When even the floors do not fit, the floors themselves are water-filled, so no
// claim is starved while another keeps more than its floor. In every case
//   sum(budgets) <= capacity  and  budget_i <= cap_i.
#ifndef MEMVIRT_DAEMON_CORE_ARBITER_H_
#define MEMVIRT_DAEMON_CORE_ARBITER_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace memvirt::daemon {

struct ArbiterClaim {
  uint64_t demand_bytes = 0;  // 0 = as much as possible.
  uint64_t min_bytes = 0;     // Floor; clamped to the cap.
  uint64_t quota_bytes = 0;   // Operator cap; 0 = none.
};

// Returns one budget per claim, in the order of `claims`.
std::vector<uint64_t> ComputeBudgets(uint64_t capacity_bytes,
                                     absl::Span<const ArbiterClaim> claims);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_ARBITER_H_

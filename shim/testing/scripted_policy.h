// ScriptedPolicy: a ResidencyPolicy for unit tests. Victims are offered in
// the order the test sets (victim_order, the first eligible one), prefetch
// candidates are the test's (upcoming), and the chunks told OnResident and
// OnEvicted are recorded in order.
#ifndef MEMVIRT_SHIM_TESTING_SCRIPTED_POLICY_H_
#define MEMVIRT_SHIM_TESTING_SCRIPTED_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/core/residency_policy.h"

namespace memvirt::shim::testing {

class ScriptedPolicy final : public ResidencyPolicy {
 public:
  const char* name() const override { return "scripted"; }
  void OnAlloc(uint32_t) override {}
  void OnFree(uint32_t) override {}
  void OnAccess(uint64_t, const uint32_t*, size_t) override {}
  void OnResident(uint32_t chunk) override { resident.push_back(chunk); }
  void OnEvicted(uint32_t chunk) override { evicted.push_back(chunk); }
  void OnBudgetChange(uint64_t) override {}
  bool PickVictim(Eligible eligible, void* context, uint32_t* victim) override {
    for (uint32_t c : victim_order) {
      if (eligible(context, c)) {
        *victim = c;
        return true;
      }
    }
    return false;
  }
  std::vector<uint32_t> PrefetchCandidates(uint64_t) override { return upcoming; }

  std::vector<uint32_t> victim_order;  // the policy's ranking of victims
  std::vector<uint32_t> upcoming;      // prefetch candidates
  std::vector<uint32_t> resident;      // OnResident, in order
  std::vector<uint32_t> evicted;       // OnEvicted, in order
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_SCRIPTED_POLICY_H_

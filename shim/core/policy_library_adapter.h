// Adapter from the shim's ResidencyPolicy to a memvirt::policy::Policy
// (policy/include/memvirt/policy/policy.h): chunk index = BlockId, one
// OnAccess per launch, eligibility predicate passed through.
//
// Thread safety: not thread-safe (see residency_policy.h).
#ifndef MEMVIRT_SHIM_CORE_POLICY_LIBRARY_ADAPTER_H_
#define MEMVIRT_SHIM_CORE_POLICY_LIBRARY_ADAPTER_H_

#include <memory>
#include <string>

#include "shim/core/residency_policy.h"

namespace memvirt::shim {

// `which`: "lru" or "lifetime".
std::unique_ptr<ResidencyPolicy> MakePolicyLibraryAdapter(const std::string& which,
                                                          uint32_t num_chunks);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_POLICY_LIBRARY_ADAPTER_H_

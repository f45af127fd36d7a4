#include "shim/core/residency_policy.h"

#include "shim/core/log.h"
#include "shim/core/policy_library_adapter.h"

namespace memvirt::shim {

std::unique_ptr<ResidencyPolicy> MakeResidencyPolicy(const std::string& name, uint32_t num_chunks) {
  if (name == "lifetime") return MakePolicyLibraryAdapter("lifetime", num_chunks);
  if (name != "lru" && name != "library-lru") {
    MEMSHIM_LOG(kWarn, "unknown MEMSHIM_POLICY '%s'; using 'lru'", name.c_str());
  }
  return MakePolicyLibraryAdapter("lru", num_chunks);
}

}  // namespace memvirt::shim

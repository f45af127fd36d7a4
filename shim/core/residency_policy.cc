#include "shim/core/residency_policy.h"

#include "shim/core/log.h"
#include "shim/core/lru_policy.h"

#ifdef MEMSHIM_WITH_POLICY_LIBRARY
#include "shim/core/policy_library_adapter.h"
#endif

namespace memvirt::shim {

namespace {
constexpr uint32_t kPrefetchDepth = 4;
}  // namespace

std::unique_ptr<ResidencyPolicy> MakeResidencyPolicy(const std::string& name, uint32_t num_chunks) {
#ifdef MEMSHIM_WITH_POLICY_LIBRARY
  if (name == "lifetime" || name == "library-lru") {
    return MakePolicyLibraryAdapter(name == "lifetime" ? "lifetime" : "lru", num_chunks);
  }
#else
  if (name == "lifetime") {
    MEMSHIM_LOG(kInfo, "policy 'lifetime' needs the policy library; using 'lru'");
  }
#endif
  if (name != "lru" && name != "lifetime" && name != "library-lru") {
    MEMSHIM_LOG(kWarn, "unknown MEMSHIM_POLICY '%s'; using 'lru'", name.c_str());
  }
  return std::make_unique<LruPolicy>(num_chunks, kPrefetchDepth);
}

}  // namespace memvirt::shim

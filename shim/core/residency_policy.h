// The shim's view of a paging policy: which resident chunk to evict, which
// chunks to bring in ahead of use. ShimCore talks only to this interface; its
// implementation is an adapter over the memvirt_policy library
// (policy_library_adapter.h), so memvirt-sim runs the same policy code as the
// shim.
//
// Thread safety: not thread-safe; ShimCore calls it under its mutex.
// Chunk ids are chunk-table indices.
#ifndef MEMVIRT_SHIM_CORE_RESIDENCY_POLICY_H_
#define MEMVIRT_SHIM_CORE_RESIDENCY_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memvirt::shim {

class ResidencyPolicy {
 public:
  using Eligible = bool (*)(void* context, uint32_t chunk);

  virtual ~ResidencyPolicy() = default;
  virtual const char* name() const = 0;

  virtual void OnAlloc(uint32_t chunk) = 0;
  virtual void OnFree(uint32_t chunk) = 0;
  // A launch (step) touching `chunks` (deduplicated) is being issued.
  virtual void OnAccess(uint64_t step, const uint32_t* chunks, size_t count) = 0;
  virtual void OnResident(uint32_t chunk) = 0;
  virtual void OnEvicted(uint32_t chunk) = 0;
  virtual void OnBudgetChange(uint64_t device_bytes) = 0;

  // A resident chunk for which eligible(context, chunk) is true, or false.
  virtual bool PickVictim(Eligible eligible, void* context, uint32_t* victim) = 0;
  // Non-resident chunks worth fetching now, soonest first, within byte_limit.
  virtual std::vector<uint32_t> PrefetchCandidates(uint64_t /*byte_limit*/) { return {}; }
  // The same, written into *out (cleared first), so that a caller asking on
  // every launch reuses one buffer instead of allocating.
  // REQUIRES: out non-null.
  virtual void PrefetchCandidatesInto(uint64_t byte_limit, std::vector<uint32_t>* out) {
    *out = PrefetchCandidates(byte_limit);
  }
  // False if PrefetchCandidates() would certainly return nothing now (lets
  // the launch fast path skip the call). Must be cheap: asked per launch.
  virtual bool MayPrefetch() const { return true; }
};

// "lifetime" (the default) or "lru" ("library-lru" is an alias of "lru"), both from the
// memvirt_policy library; an unknown name gets "lru".
std::unique_ptr<ResidencyPolicy> MakeResidencyPolicy(const std::string& name, uint32_t num_chunks);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_RESIDENCY_POLICY_H_

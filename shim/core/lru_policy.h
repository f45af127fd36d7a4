// Built-in exact LRU over resident chunks with sequential prefetch.
//
// Thread safety: not thread-safe (see residency_policy.h).
//
// Note [sequential prefetch]
//   When a launch touches a chunk that was not resident, the chunks that the
//   previous pass touched right after it are likely next (training repeats
//   the same kernel sequence every iteration). The policy remembers, per
//   chunk, the chunk first touched after it and offers up to `depth` of that
//   chain that are not resident as prefetch candidates.
#ifndef MEMVIRT_SHIM_CORE_LRU_POLICY_H_
#define MEMVIRT_SHIM_CORE_LRU_POLICY_H_

#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/residency_policy.h"

namespace memvirt::shim {

class LruPolicy : public ResidencyPolicy {
 public:
  LruPolicy(uint32_t num_chunks, uint32_t prefetch_depth);

  const char* name() const override { return "lru"; }
  void OnAlloc(uint32_t chunk) override;
  void OnFree(uint32_t chunk) override;
  void OnAccess(uint64_t step, const uint32_t* chunks, size_t count) override;
  void OnResident(uint32_t chunk) override;
  void OnEvicted(uint32_t chunk) override;
  void OnBudgetChange(uint64_t) override {}
  bool PickVictim(Eligible eligible, void* context, uint32_t* victim) override;
  std::vector<uint32_t> PrefetchCandidates(uint64_t byte_limit) override;
  void PrefetchCandidatesInto(uint64_t byte_limit, std::vector<uint32_t>* out) override;
  bool MayPrefetch() const override { return !missed_.empty(); }

  // Test-only: resident chunks from most to least recently used.
  std::vector<uint32_t> TEST_Order() const;

 private:
  void Unlink(uint32_t chunk);
  void PushFront(uint32_t chunk);

  struct Node {
    uint32_t prev = kNoIndex;
    uint32_t next = kNoIndex;
    uint32_t successor = kNoIndex;  // chunk touched first after this one last time
    bool linked = false;            // in the resident list
    bool live = false;
  };
  std::vector<Node> nodes_;
  uint32_t head_ = kNoIndex;  // most recent
  uint32_t tail_ = kNoIndex;  // least recent
  uint32_t last_touched_ = kNoIndex;
  uint32_t prefetch_depth_;
  std::vector<uint32_t> missed_;  // non-resident chunks seen by the last OnAccess
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_LRU_POLICY_H_

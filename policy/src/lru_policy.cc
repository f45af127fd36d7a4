// LRU demand paging: the baseline UVM-style systems implement.
//
// Note [LRU recency]
//   Recency is the order of the last access, where becoming resident counts
//   as an access (a block is made resident because a kernel is about to use
//   it). Only resident blocks are ordered; a list gives O(1) updates.

#include <list>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "memvirt/policy/policy.h"

namespace memvirt::policy {
namespace {

class LruPolicy final : public Policy {
 public:
  std::string_view name() const override { return "lru"; }

  void OnAlloc(BlockId block, const BlockInfo& /*info*/) override { blocks_[block]; }
  void OnFree(BlockId block) override {
    auto it = blocks_.find(block);
    if (it == blocks_.end()) return;
    if (it->second.resident) order_.erase(it->second.pos);
    blocks_.erase(it);
  }
  void OnAccess(Step /*step*/, std::span<const BlockAccess> accesses) override {
    for (const BlockAccess& a : accesses) {
      auto it = blocks_.find(a.block);
      if (it == blocks_.end() || !it->second.resident) continue;
      order_.splice(order_.end(), order_, it->second.pos);
    }
  }
  void OnIterationMark() override {}
  void OnBudgetChange(uint64_t /*device_bytes*/) override {}
  void OnResident(BlockId block) override {
    Entry& e = blocks_[block];
    if (e.resident) return;
    e.resident = true;
    e.pos = order_.insert(order_.end(), block);
  }
  void OnEvicted(BlockId block) override {
    auto it = blocks_.find(block);
    if (it == blocks_.end() || !it->second.resident) return;
    order_.erase(it->second.pos);
    it->second.resident = false;
  }

  std::optional<BlockId> PickVictim(EvictablePredicate can_evict) override {
    for (BlockId b : order_) {
      if (can_evict(b)) return b;
    }
    return std::nullopt;
  }
  bool IsDead(BlockId /*block*/) const override { return false; }

 private:
  struct Entry {
    bool resident = false;
    std::list<BlockId>::iterator pos;
  };
  absl::flat_hash_map<BlockId, Entry> blocks_;
  std::list<BlockId> order_;  // resident blocks, least recently used first
};

}  // namespace

std::unique_ptr<Policy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace memvirt::policy

// LRU demand paging: the baseline UVM-style systems implement.
//
// Note [LRU recency]
//   Recency is the order of the last access, where becoming resident counts
//   as an access (a block is made resident because a kernel is about to use
//   it). Only resident blocks are ordered; a list gives O(1) updates (Note
//   [dense block ids]).

#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "memvirt/policy/policy.h"

namespace memvirt::policy {
namespace {

class LruPolicy final : public Policy {
 public:
  std::string_view name() const override { return "lru"; }

  void OnAlloc(BlockId block, const BlockInfo& /*info*/) override { Insert(block); }
  void OnFree(BlockId block) override {
    Node* n = Find(block);
    if (n == nullptr) return;
    if (n->resident) Unlink(n);
    Erase(block);
  }
  void OnAccess(Step /*step*/, std::span<const BlockAccess> accesses) override {
    for (const BlockAccess& a : accesses) {
      Node* n = Find(a.block);
      if (n == nullptr || !n->resident || a.block == tail_) continue;  // tail: the most recent
      Unlink(n);
      Append(a.block, n);
    }
  }
  void OnIterationMark() override {}
  void OnBudgetChange(uint64_t /*device_bytes*/) override {}
  void OnResident(BlockId block) override {
    Node* n = Insert(block);
    if (n->resident) return;
    Append(block, n);
  }
  void OnEvicted(BlockId block) override {
    Node* n = Find(block);
    if (n == nullptr || !n->resident) return;
    Unlink(n);
  }

  std::optional<BlockId> PickVictim(EvictablePredicate can_evict) override {
    for (BlockId b = head_; b != kNone; b = At(b).next) {
      if (can_evict(b)) return b;
    }
    return std::nullopt;
  }
  bool IsDead(BlockId /*block*/) const override { return false; }

 private:
  // Note [dense block ids]
  //   Recency is an intrusive doubly linked list through the blocks' nodes,
  //   linked by id, so no update allocates. Ids below kDenseLimit (the
  //   shim's chunk indices, the simulator's tensor ids) index a vector, grown
  //   to the largest such id seen; other ids live in a hash map. A launch's
  //   accesses then cost a bounds check and a load each instead of a hash
  //   lookup and a list-node splice.
  static constexpr BlockId kNone = ~BlockId{0};
  static constexpr BlockId kDenseLimit = BlockId{1} << 22;
  struct Node {
    BlockId prev = kNone, next = kNone;  // toward the least / most recently used
    bool known = false;                  // allocated or resident, not freed since
    bool resident = false;               // in the list
  };

  Node* Find(BlockId block) {
    if (block < kDenseLimit) {
      return block < dense_.size() && dense_[block].known ? &dense_[block] : nullptr;
    }
    auto it = sparse_.find(block);
    return it == sparse_.end() ? nullptr : &it->second;
  }
  // The node of a block the list links to. REQUIRES: `block` known.
  Node& At(BlockId block) {
    return block < kDenseLimit ? dense_[block] : sparse_.find(block)->second;
  }
  // The node of `block`, made known if it was not.
  Node* Insert(BlockId block) {
    Node* n;
    if (block < kDenseLimit) {
      if (block >= dense_.size()) dense_.resize(block + 1);
      n = &dense_[block];
    } else {
      n = &sparse_[block];
    }
    n->known = true;
    return n;
  }
  // REQUIRES: `block` known and not resident.
  void Erase(BlockId block) {
    if (block < kDenseLimit) {
      dense_[block] = Node{};
    } else {
      sparse_.erase(block);
    }
  }
  // REQUIRES: `n` is `block`'s node, not resident.
  void Append(BlockId block, Node* n) {
    n->resident = true;
    n->prev = tail_;
    n->next = kNone;
    if (tail_ != kNone) {
      At(tail_).next = block;
    } else {
      head_ = block;
    }
    tail_ = block;
  }
  // REQUIRES: `n` is a resident block's node.
  void Unlink(Node* n) {
    (n->prev != kNone ? At(n->prev).next : head_) = n->next;
    (n->next != kNone ? At(n->next).prev : tail_) = n->prev;
    n->prev = n->next = kNone;
    n->resident = false;
  }

  std::vector<Node> dense_;
  absl::flat_hash_map<BlockId, Node> sparse_;
  BlockId head_ = kNone;  // least recently used resident block
  BlockId tail_ = kNone;  // most recently used
};

}  // namespace

std::unique_ptr<Policy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }

}  // namespace memvirt::policy

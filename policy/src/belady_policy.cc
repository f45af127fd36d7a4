// Belady/MIN: the offline oracle. See MakeBeladyPolicy() in policy.h.
//
// Note [Belady definition]
//   The i-th OnAccess() is position i of the given future. Victim: among
//   eligible resident blocks, a dead one (next access overwrites it, or no
//   future access) with the farthest next use, else the live block with the
//   farthest next use. For read-only sequences this is MIN and minimizes
//   fetches; with dead-data drops it is the traffic lower bound the lifetime
//   policy is compared against.

#include "memvirt/policy/policy.h"
#include "planner.h"
#include "schedule.h"

namespace memvirt::policy {
namespace {

using internal::Planner;
using internal::Schedule;

class BeladyPolicy final : public Policy {
 public:
  BeladyPolicy(std::vector<StepAccesses> future, const LifetimeOptions& options)
      : planner_(std::make_shared<Schedule>(std::move(future)), /*cyclic=*/false, options) {}

  std::string_view name() const override { return "belady"; }
  void OnAlloc(BlockId block, const BlockInfo& info) override { planner_.Alloc(block, info.bytes); }
  void OnFree(BlockId block) override { planner_.Free(block); }
  void OnAccess(Step /*step*/, std::span<const BlockAccess> /*accesses*/) override {
    planner_.Advance(planner_.position() + 1);
  }
  void OnIterationMark() override {}
  void OnBudgetChange(uint64_t device_bytes) override { planner_.SetBudget(device_bytes); }
  void OnResident(BlockId block) override { planner_.Resident(block); }
  void OnEvicted(BlockId block) override { planner_.Evicted(block); }
  std::optional<BlockId> PickVictim(EvictablePredicate can_evict) override {
    return planner_.PickVictim(can_evict);
  }
  std::optional<BlockId> PickVictimForPrefetch(EvictablePredicate can_evict,
                                               BlockId incoming) override {
    return planner_.PickVictimForPrefetch(can_evict, incoming);
  }
  std::vector<PrefetchRequest> PrefetchCandidates(uint64_t byte_limit) override {
    return planner_.Prefetch(byte_limit);
  }
  std::vector<BlockId> EvictAheadCandidates(EvictablePredicate can_evict,
                                            uint64_t free_bytes) override {
    return planner_.EvictAhead(can_evict, free_bytes);
  }
  bool IsDead(BlockId block) const override { return planner_.IsDead(block); }
  bool NextAccessOverwrites(BlockId block) const override {
    return planner_.NextAccessOverwrites(block);
  }
  std::optional<uint64_t> NextUseDistance(BlockId block) const override {
    return planner_.NextUseDistance(block);
  }

 private:
  Planner planner_;
};

}  // namespace

std::unique_ptr<Policy> MakeBeladyPolicy(std::vector<StepAccesses> future,
                                         const LifetimeOptions& prefetch_options) {
  return std::make_unique<BeladyPolicy>(std::move(future), prefetch_options);
}

}  // namespace memvirt::policy

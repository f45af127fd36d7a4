// Planner: victim choice, dead-data detection and prefetch planning against a
// known schedule (the full future for Belady/MIN, the learned iteration for
// the lifetime policy).
//
// Thread safety: not thread-safe; owned and serialized by one Policy.
//
// Note [lazy re-rank]
//   Advance() runs on every launch, while ranks are read only by victim
//   choice (PickVictim*, EvictAhead) and the per-block queries. So Advance()
//   only records the blocks the step touches as stale; Settle() re-ranks
//   them, once each however many steps touched them, before a victim choice,
//   and the per-block queries compute a stale block's values on the fly.
//   Results are those of eager re-ranking: a block's next use after the
//   current position is the same whether it is computed at the step that
//   touched it or later, as long as no step touched it in between (and one
//   that did marked it stale again). Residency changes move a stale block in
//   the victim set under its old rank, the rank Settle() moves it from.
//
// Note [victim rank]
//   Resident blocks are kept in one ordered set by rank, largest evicted
//   first: dead blocks (no future read before the next overwrite, or no
//   future use at all) rank above every live block, and within each group
//   the farther the next use the higher the rank. Dropping a dead block costs
//   no traffic; among live blocks the farthest next use is MIN's choice.
//   With a residency plan (Note [residency plan]), live blocks in a gap MIN
//   spends off the device rank above the kept ones (below dead ones); once
//   fetched back early for the use that ends the gap they rank between the
//   off and the kept ones: evicting one only undoes a prefetch (the block is
//   clean), where evicting a kept block is a write back MIN does not make.
//
// Note [data left by the learning iteration]
//   Data the learning (unplanned) iteration left resident is not evicted
//   ahead, whatever its gap: Resident() marks it fetched back early
//   (`refetched`), which ranks it below the off blocks EvictOffBlocks()
//   takes, so it leaves only when its room is needed, until its next use,
//   as in the demand MIN bound. So the write backs by which the first
//   planned iteration exceeds the bound (docs/policy.md, GPT at 2x) are not
//   these: they are that iteration's own end-of-iteration data (optimizer
//   state, weights), evicted ahead as the steady state needs, on top of the
//   learning iteration's dirty data written back on demand.

#ifndef MEMVIRT_POLICY_SRC_PLANNER_H_
#define MEMVIRT_POLICY_SRC_PLANNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "memvirt/policy/policy.h"
#include "residency_plan.h"
#include "schedule.h"

namespace memvirt::policy::internal {

class Planner {
 public:
  // REQUIRES: schedule non-null.
  Planner(std::shared_ptr<const Schedule> schedule, bool cyclic, const LifetimeOptions& options);

  void Alloc(BlockId block, uint64_t bytes);
  void Free(BlockId block);
  void Resident(BlockId block);
  void Evicted(BlockId block);
  void SetBudget(uint64_t device_bytes);
  // Size of a block that is not allocated now (e.g. freed in the previous
  // iteration): lets the lookahead count the memory of its rebirth.
  void RememberSize(BlockId block, uint64_t bytes);

  // The step at absolute position `position` was launched: the blocks it
  // touches get their next use recomputed. REQUIRES: position > position().
  void Advance(int64_t position);
  // Jump to `position` (the step just launched) and recompute every block.
  void Realign(int64_t position);
  int64_t position() const { return position_; }

  // Not const: re-rank the stale blocks first (Note [lazy re-rank]).
  std::optional<BlockId> PickVictim(EvictablePredicate can_evict);
  std::optional<BlockId> PickVictimForPrefetch(EvictablePredicate can_evict, BlockId incoming);
  std::vector<PrefetchRequest> Prefetch(uint64_t byte_limit) const;
  // The same into `out` (cleared first). Plans nothing if byte_limit == 0.
  void Prefetch(uint64_t byte_limit, std::vector<PrefetchRequest>& out) const;
  std::vector<BlockId> EvictAhead(EvictablePredicate can_evict, uint64_t free_bytes);

  bool IsDead(BlockId block) const;
  bool NextAccessOverwrites(BlockId block) const;
  std::optional<uint64_t> NextUseDistance(BlockId block) const;

 private:
  static constexpr uint64_t kNever = uint64_t{1} << 60;
  static constexpr uint64_t kEarlyBit = uint64_t{1} << 61;
  static constexpr uint64_t kOffBit = uint64_t{1} << 62;
  static constexpr uint64_t kDeadBit = uint64_t{1} << 63;

  struct Block {
    bool allocated = false;
    bool resident = false;
    bool dead = false;
    bool off = false;        // the residency plan has it off the device until `next`
    bool refetched = false;  // made resident since its last use (for the use at `next`)
    uint64_t bytes = 0;      // kept after Free() for the lookahead
    uint64_t next = kNever;  // absolute position of the next use
    AccessMode next_mode = AccessMode::kReadWrite;
    uint64_t rank = 0;
  };

  // The lookahead window's plan (Note [prefetch lookahead]), cached until
  // anything it depends on changes.
  struct Window {
    bool valid = false;
    std::vector<PrefetchRequest> prefetch;  // all candidates, soonest first
    std::vector<uint32_t> prefetch_dense;   // their dense indices
    uint64_t peak_shortfall = 0;            // memory needed beyond what is resident
    uint64_t evict_shortfall = 0;           // the same within the evict-ahead horizon
    uint32_t stamp = 0;                     // in-window blocks carry this stamp
    uint64_t end = 0;                       // absolute position of the last step walked
  };

  Block* Find(BlockId id);
  const Block* Find(BlockId id) const;
  // `dense`: the block's dense index if it has one (saves the lookup).
  void Refresh(BlockId id, Block& b, std::optional<uint32_t> dense = std::nullopt);
  // Recomputes b's next use, mode, deadness and rank for position_ (no
  // victim-set update).
  void Renew(BlockId id, Block& b, std::optional<uint32_t> dense) const;
  // Re-ranks the blocks Advance() left stale (Note [lazy re-rank]).
  void Settle();
  // b as Settle() would leave it.
  Block Current(BlockId id, const Block& b) const;
  static uint64_t RankOf(const Block& b) {
    if (b.dead) return kDeadBit | b.next;
    if (!b.off) return b.next;
    return (b.refetched ? kEarlyBit : kOffBit) | b.next;
  }
  bool Planned() const { return !residency_.empty(); }
  // Rebuilds the residency plan for the current budget and block sizes.
  void PlanResidency();
  std::vector<BlockId> EvictOffBlocks(EvictablePredicate can_evict);
  bool InWindow(BlockId id) const;
  const Window& PlanWindow() const;
  void Invalidate() { window_.valid = false; }

  std::shared_ptr<const Schedule> schedule_;
  bool cyclic_;
  LifetimeOptions options_;
  uint64_t budget_ = 0;
  int64_t position_ = -1;
  uint64_t resident_bytes_ = 0;  // of all resident blocks
  ResidencyPlan residency_;
  bool residency_stale_ = true;
  std::vector<Block> dense_;                        // blocks of the schedule, by dense index
  std::vector<StepUse> stale_;                      // touched since the last Settle()
  int64_t phase_position_ = INT64_MIN;              // cyclic: Advance()'s last position and
  uint64_t phase_ = 0;                              // its phase (position % size)
  std::vector<uint8_t> stale_flag_;                 // by dense index: in stale_
  absl::flat_hash_map<BlockId, Block> extra_;       // blocks the schedule does not know
  std::set<std::pair<uint64_t, BlockId>> victims_;  // resident blocks by rank
  mutable std::vector<uint32_t> stamps_;            // by dense index: touched by the window
  mutable std::vector<uint32_t> counted_;           // by dense index: holding window memory
  mutable uint32_t epoch_ = 0;
  mutable Window window_;
};

}  // namespace memvirt::policy::internal

#endif  // MEMVIRT_POLICY_SRC_PLANNER_H_

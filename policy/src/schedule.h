// Schedule: an access sequence (one entry per step) indexed by block, so that
// "when is block b used next after position p, and how" is a binary search.
//
// Thread safety: immutable after construction; safe to share across threads.

#ifndef MEMVIRT_POLICY_SRC_SCHEDULE_H_
#define MEMVIRT_POLICY_SRC_SCHEDULE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "memvirt/policy/policy.h"

namespace memvirt::policy::internal {

// Where a block is used: positions (strictly increasing) and the mode there.
struct BlockUses {
  std::vector<uint32_t> positions;
  std::vector<AccessMode> modes;
};

// One access of a step, as the prefetch walk sees it.
struct StepUse {
  BlockId block = 0;
  uint32_t dense = 0;  // the block's dense index in this schedule
  AccessMode mode = AccessMode::kReadWrite;
  // The data is dead after this access: the next use overwrites it, or there
  // is none (non-cyclic schedules only; cyclic ones wrap to the first use).
  bool dead_after = false;
};

struct NextUse {
  uint64_t position = 0;  // absolute position (see Schedule::NextUseAfter)
  AccessMode mode = AccessMode::kReadWrite;
  uint32_t index = 0;  // which of the block's uses (index into BlockUses)
};

class Schedule {
 public:
  // A block listed twice in one step is merged (modes combined).
  explicit Schedule(std::vector<StepAccesses> steps);

  uint64_t size() const { return steps_.size(); }
  const StepAccesses& step(uint64_t position) const { return steps_[position]; }
  double duration_us(uint64_t position) const { return steps_[position].duration_us; }
  // Order-independent hash of the set of blocks a step touches.
  uint64_t signature(uint64_t position) const { return signatures_[position]; }
  const BlockUses* uses(BlockId block) const;
  // REQUIRES: dense < num_blocks().
  const BlockUses& uses_of_dense(uint32_t dense) const { return uses_[dense]; }
  // Blocks of the schedule are numbered 0..num_blocks()-1.
  uint32_t num_blocks() const { return static_cast<uint32_t>(ids_.size()); }
  std::optional<uint32_t> DenseIndex(BlockId block) const {
    auto it = dense_.find(block);
    if (it == dense_.end()) return std::nullopt;
    return it->second;
  }
  // The accesses of a step with their dead-after flags, for `cyclic` use.
  const std::vector<StepUse>& uses_at(uint64_t position, bool cyclic) const {
    return cyclic ? cyclic_uses_[position] : linear_uses_[position];
  }

  // First use of `block` at an absolute position > `after` (`after` may be
  // -1: before the start). If `cyclic`, the schedule repeats forever and
  // absolute position a means step a % size() of iteration a / size().
  std::optional<NextUse> NextUseAfter(BlockId block, int64_t after, bool cyclic) const;
  // The same for the block with dense index `dense` (no hash lookup).
  // REQUIRES: dense < num_blocks().
  std::optional<NextUse> NextUseAfterDense(uint32_t dense, int64_t after, bool cyclic) const;

  // Positions whose signature equals `sig`, increasing.
  const std::vector<uint64_t>* PositionsWithSignature(uint64_t sig) const;

 private:
  std::vector<StepAccesses> steps_;
  std::vector<uint64_t> signatures_;
  std::vector<std::vector<StepUse>> linear_uses_, cyclic_uses_;
  absl::flat_hash_map<BlockId, uint32_t> dense_;
  std::vector<BlockId> ids_;
  std::vector<BlockUses> uses_;  // by dense index
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> by_signature_;
};

// Order-independent signature of the blocks and modes in `accesses`.
uint64_t AccessSignature(std::span<const BlockAccess> accesses);

// Combines two modes of the same block within one step.
AccessMode CombineModes(AccessMode a, AccessMode b);

}  // namespace memvirt::policy::internal

#endif  // MEMVIRT_POLICY_SRC_SCHEDULE_H_

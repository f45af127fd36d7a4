#include "schedule.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace memvirt::policy::internal {

AccessMode CombineModes(AccessMode a, AccessMode b) {
  return static_cast<AccessMode>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}

uint64_t AccessSignature(std::span<const BlockAccess> accesses) {
  // Sum and xor of per-block hashes: independent of order, cheap to update.
  uint64_t sum = 0, x = 0;
  for (const BlockAccess& a : accesses) {
    uint64_t h = absl::HashOf(a.block, static_cast<uint8_t>(a.mode));
    sum += h;
    x ^= h * 0x9e3779b97f4a7c15ULL;
  }
  return absl::HashOf(sum, x, accesses.size());
}

Schedule::Schedule(std::vector<StepAccesses> steps) : steps_(std::move(steps)) {
  signatures_.reserve(steps_.size());
  for (uint64_t p = 0; p < steps_.size(); ++p) {
    StepAccesses& s = steps_[p];
    // Merge duplicates so that each block appears once per step.
    std::sort(s.accesses.begin(), s.accesses.end(),
              [](const BlockAccess& a, const BlockAccess& b) { return a.block < b.block; });
    std::vector<BlockAccess> merged;
    merged.reserve(s.accesses.size());
    for (const BlockAccess& a : s.accesses) {
      if (!merged.empty() && merged.back().block == a.block) {
        merged.back().mode = CombineModes(merged.back().mode, a.mode);
      } else {
        merged.push_back(a);
      }
    }
    s.accesses = std::move(merged);
    for (const BlockAccess& a : s.accesses) {
      auto [it, inserted] = dense_.try_emplace(a.block, static_cast<uint32_t>(ids_.size()));
      if (inserted) {
        ids_.push_back(a.block);
        uses_.emplace_back();
      }
      BlockUses& u = uses_[it->second];
      u.positions.push_back(static_cast<uint32_t>(p));
      u.modes.push_back(a.mode);
    }
    signatures_.push_back(AccessSignature(s.accesses));
    by_signature_[signatures_.back()].push_back(p);
  }
  linear_uses_.resize(steps_.size());
  cyclic_uses_.resize(steps_.size());
  for (uint64_t p = 0; p < steps_.size(); ++p) {
    for (const BlockAccess& a : steps_[p].accesses) {
      const uint32_t d = dense_.at(a.block);
      const BlockUses& u = uses_[d];
      const size_t i =
          std::lower_bound(u.positions.begin(), u.positions.end(), static_cast<uint32_t>(p)) -
          u.positions.begin();
      const bool last = i + 1 == u.positions.size();
      const AccessMode next_linear = last ? AccessMode::kWrite : u.modes[i + 1];
      const AccessMode next_cyclic = last ? u.modes[0] : u.modes[i + 1];
      linear_uses_[p].push_back(StepUse{a.block, d, a.mode, next_linear == AccessMode::kWrite});
      cyclic_uses_[p].push_back(StepUse{a.block, d, a.mode, next_cyclic == AccessMode::kWrite});
    }
  }
}

const BlockUses* Schedule::uses(BlockId block) const {
  auto it = dense_.find(block);
  return it == dense_.end() ? nullptr : &uses_[it->second];
}

const std::vector<uint64_t>* Schedule::PositionsWithSignature(uint64_t sig) const {
  auto it = by_signature_.find(sig);
  return it == by_signature_.end() ? nullptr : &it->second;
}

std::optional<NextUse> Schedule::NextUseAfter(BlockId block, int64_t after, bool cyclic) const {
  auto it = dense_.find(block);
  if (it == dense_.end()) return std::nullopt;
  return NextUseAfterDense(it->second, after, cyclic);
}

std::optional<NextUse> Schedule::NextUseAfterDense(uint32_t dense, int64_t after,
                                                   bool cyclic) const {
  const BlockUses* u = &uses_[dense];
  if (u->positions.empty()) return std::nullopt;
  const int64_t n = static_cast<int64_t>(steps_.size());
  int64_t base = 0;
  int64_t within = after;
  if (cyclic && after >= 0) {
    base = (after / n) * n;
    within = after % n;
  }
  // First position strictly greater than `within`.
  auto it = within < 0 ? u->positions.begin()
                       : std::upper_bound(u->positions.begin(), u->positions.end(),
                                          static_cast<uint32_t>(within));
  if (it != u->positions.end()) {
    size_t i = it - u->positions.begin();
    return NextUse{static_cast<uint64_t>(base + *it), u->modes[i], static_cast<uint32_t>(i)};
  }
  if (!cyclic) return std::nullopt;
  return NextUse{static_cast<uint64_t>(base + n + u->positions[0]), u->modes[0], 0};
}

}  // namespace memvirt::policy::internal

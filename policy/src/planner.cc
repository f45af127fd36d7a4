#include "planner.h"

#include <algorithm>

namespace memvirt::policy::internal {

Planner::Planner(std::shared_ptr<const Schedule> schedule, bool cyclic,
                 const LifetimeOptions& options)
    : schedule_(std::move(schedule)),
      cyclic_(cyclic),
      options_(options),
      dense_(schedule_->num_blocks()),
      stale_flag_(schedule_->num_blocks(), 0),
      stamps_(schedule_->num_blocks(), 0),
      counted_(schedule_->num_blocks(), 0) {}

Planner::Block* Planner::Find(BlockId id) {
  if (std::optional<uint32_t> d = schedule_->DenseIndex(id)) return &dense_[*d];
  auto it = extra_.find(id);
  return it == extra_.end() ? nullptr : &it->second;
}

const Planner::Block* Planner::Find(BlockId id) const {
  return const_cast<Planner*>(this)->Find(id);
}

void Planner::Renew(BlockId id, Block& b, std::optional<uint32_t> dense) const {
  std::optional<NextUse> next = dense.has_value()
                                    ? schedule_->NextUseAfterDense(*dense, position_, cyclic_)
                                    : schedule_->NextUseAfter(id, position_, cyclic_);
  if (next.has_value()) {
    b.next = std::min(next->position, kNever - 1);
    b.next_mode = next->mode;
    b.dead = next->mode == AccessMode::kWrite;
    b.off = dense.has_value() && Planned() && residency_.OffBefore(*dense, next->index);
  } else {
    b.off = false;
    b.next = kNever;
    b.next_mode = AccessMode::kReadWrite;
    // Non-cyclic: the schedule is the whole future, so "no next use" means
    // dead. Cyclic: the block is unknown to the learned iteration; keep it.
    b.dead = !cyclic_;
  }
  b.rank = RankOf(b);
}

void Planner::Refresh(BlockId id, Block& b, std::optional<uint32_t> dense) {
  const uint64_t old_rank = b.rank;
  Renew(id, b, dense);
  // Note [victim set churn]: every victim choice re-ranks the blocks touched
  // since the last one (Note [lazy re-rank]); moving the set node (extract,
  // rekey, insert) avoids a free and a malloc per block, and an unchanged
  // rank needs no move at all.
  if (b.resident && b.rank != old_rank) {
    auto node = victims_.extract({old_rank, id});
    if (node.empty()) {
      victims_.insert({b.rank, id});
    } else {
      node.value() = {b.rank, id};
      victims_.insert(std::move(node));
    }
  }
}

void Planner::Alloc(BlockId block, uint64_t bytes) {
  Invalidate();
  Block* b = Find(block);
  if (b == nullptr) b = &extra_[block];
  if (b->resident) {
    victims_.erase({b->rank, block});
    resident_bytes_ -= b->bytes;
  }
  *b = Block{};
  b->allocated = true;
  b->bytes = bytes;
  Refresh(block, *b);
}

void Planner::Free(BlockId block) {
  Invalidate();
  if (std::optional<uint32_t> d = schedule_->DenseIndex(block)) {
    Block& b = dense_[*d];
    if (b.resident) {
      victims_.erase({b.rank, block});
      resident_bytes_ -= b.bytes;
    }
    const uint64_t bytes = b.bytes;
    b = Block{};
    b.bytes = bytes;
    return;
  }
  auto it = extra_.find(block);
  if (it == extra_.end()) return;
  if (it->second.resident) {
    victims_.erase({it->second.rank, block});
    resident_bytes_ -= it->second.bytes;
  }
  extra_.erase(it);
}

void Planner::RememberSize(BlockId block, uint64_t bytes) {
  if (std::optional<uint32_t> d = schedule_->DenseIndex(block)) {
    if (!dense_[*d].allocated) dense_[*d].bytes = bytes;
    Invalidate();
  }
}

void Planner::SetBudget(uint64_t device_bytes) {
  if (budget_ == device_bytes) return;
  budget_ = device_bytes;
  residency_stale_ = true;
  Invalidate();
  if (position_ >= 0) Realign(position_);  // every rank depends on the plan
}

void Planner::PlanResidency() {
  residency_stale_ = false;
  if (!cyclic_ || !options_.plan_residency) return;
  std::vector<uint64_t> bytes(dense_.size());
  for (size_t d = 0; d < dense_.size(); ++d) bytes[d] = dense_[d].bytes;
  residency_ = ResidencyPlan(*schedule_, bytes, budget_);
}

void Planner::Resident(BlockId block) {
  Block* b = Find(block);
  if (b == nullptr || !b->allocated || b->resident) return;
  b->resident = true;
  resident_bytes_ += b->bytes;
  b->refetched = true;
  b->rank = RankOf(*b);
  victims_.insert({b->rank, block});
  if (InWindow(block)) Invalidate();
}

void Planner::Evicted(BlockId block) {
  Block* b = Find(block);
  if (b == nullptr || !b->resident) return;
  victims_.erase({b->rank, block});
  b->resident = false;
  resident_bytes_ -= b->bytes;
  b->refetched = false;
  b->rank = RankOf(*b);
  if (InWindow(block)) Invalidate();
}

void Planner::Advance(int64_t position) {
  Invalidate();
  position_ = position;
  const uint64_t n = schedule_->size();
  if (n == 0) return;
  uint64_t p = static_cast<uint64_t>(position);
  if (cyclic_) {
    // The next position's phase without a division (one per launch otherwise).
    p = position == phase_position_ + 1 ? (phase_ + 1 == n ? 0 : phase_ + 1) : p % n;
    phase_ = p;
    phase_position_ = position;
  }
  if (p >= n) return;
  // Note [lazy re-rank]: only remember what to refresh.
  for (const StepUse& a : schedule_->uses_at(p, cyclic_)) {
    if (stale_flag_[a.dense]) continue;
    stale_flag_[a.dense] = 1;
    stale_.push_back(a);
  }
}

void Planner::Settle() {
  for (const StepUse& a : stale_) {
    stale_flag_[a.dense] = 0;
    Block& b = dense_[a.dense];
    b.refetched = false;  // used since: a new gap starts
    if (b.allocated) Refresh(a.block, b, a.dense);
  }
  stale_.clear();
}

Planner::Block Planner::Current(BlockId id, const Block& b) const {
  std::optional<uint32_t> d = schedule_->DenseIndex(id);
  if (!d.has_value() || !stale_flag_[*d]) return b;
  Block fresh = b;
  fresh.refetched = false;
  Renew(id, fresh, d);
  return fresh;
}

void Planner::Realign(int64_t position) {
  Invalidate();
  for (const StepUse& a : stale_) stale_flag_[a.dense] = 0;  // everything is refreshed below
  stale_.clear();
  position_ = position;
  if (residency_stale_) PlanResidency();
  for (auto& [id, b] : extra_) Refresh(id, b);
  // Dense blocks: visit through the schedule's steps (each block at least once).
  std::vector<bool> done(dense_.size(), false);
  for (uint64_t p = 0; p < schedule_->size(); ++p) {
    for (const StepUse& a : schedule_->uses_at(p, cyclic_)) {
      if (done[a.dense]) continue;
      done[a.dense] = true;
      if (dense_[a.dense].allocated) Refresh(a.block, dense_[a.dense], a.dense);
    }
  }
}

std::optional<BlockId> Planner::PickVictim(EvictablePredicate can_evict) {
  Settle();
  for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) {
    if (can_evict(it->second)) return it->second;
  }
  return std::nullopt;
}

std::optional<BlockId> Planner::PickVictimForPrefetch(EvictablePredicate can_evict,
                                                      BlockId incoming) {
  Settle();
  const Block* in = Find(incoming);
  if (in == nullptr || !in->allocated) return std::nullopt;
  const uint64_t need = in->next;
  for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) {
    const Block* v = Find(it->second);
    // Live blocks are sorted by next use: once one is needed no later than
    // the incoming block, so are all the rest. With a residency plan, blocks
    // it keeps are not evicted early (Note [residency plan]).
    if (!v->dead && v->next <= need) break;
    if (Planned() && (it->first & (kDeadBit | kOffBit)) == 0) break;
    if (v->next > need && can_evict(it->second)) return it->second;
  }
  return std::nullopt;
}

bool Planner::InWindow(BlockId id) const {
  if (!window_.valid) return false;
  std::optional<uint32_t> d = schedule_->DenseIndex(id);
  return d.has_value() && stamps_[*d] == window_.stamp;
}

// Note [prefetch lookahead]
//   Walk the schedule forward from the next step and collect non-resident
//   blocks in order of need. Blocks whose next access overwrites them need no
//   data and are not fetched, but like every block touched in the window they
//   need memory: the walk keeps the memory profile of the window (distinct
//   blocks touched so far, minus those whose data dies after their access)
//   and stops where it would exceed the device budget. Beyond that point a
//   prefetched block would only be evicted again before its use (MIN keeps
//   the soonest-needed blocks, and those fill the budget). The walk also stops
//   after `lookahead_slack` times the time the link needs to fill the budget,
//   and after one iteration (cyclic) or at the end of the future. With unknown
//   bandwidth or durations it covers `default_lookahead_steps` steps.
//
// Note [window hysteresis]
//   The window's end moves with every step, and blocks just inside it at one
//   step can fall outside at the next. Were those evicted ahead, the prefetch
//   and the eviction would undo each other. So only the first
//   `plan_fraction` of the budget is planned (prefetched, made room for) and
//   the whole window is protected from evict-ahead.
//
// Note [evict ahead]
//   The memory the window needs beyond what is resident is the peak over the
//   window of (bytes of non-resident blocks touched so far - bytes whose data
//   died after their access). What free memory does not cover, up to the
//   step `evict_ahead_slack` x budget / bandwidth of compute time ahead, is
//   evicted ahead of need, from blocks the window does not touch, in victim
//   order; their write backs then overlap compute instead of delaying the
//   kernel that needs the room. Only that short prefix: a victim chosen now
//   is the farthest-needed block *now*, while MIN choosing at the time of
//   need would also see the blocks born in between (e.g. forward activations
//   used again only in backward) and evict those instead. Over the whole
//   window this cost BERT-Base 1.5x the demand MIN traffic; beyond the short
//   prefix, prefetches make room through PickVictimForPrefetch() at issue.
const Planner::Window& Planner::PlanWindow() const {
  if (window_.valid) return window_;
  Window& w = window_;
  w.prefetch.clear();
  w.prefetch_dense.clear();
  w.peak_shortfall = 0;
  w.evict_shortfall = 0;
  w.stamp = ++epoch_;
  if (w.stamp == 0) {  // wrapped: clear stale stamps
    std::fill(stamps_.begin(), stamps_.end(), 0);
    std::fill(counted_.begin(), counted_.end(), 0);
    w.stamp = epoch_ = 1;
  }
  w.valid = true;
  const uint64_t n = schedule_->size();
  if (n == 0) return w;
  const uint64_t first = static_cast<uint64_t>(position_ + 1);
  uint64_t max_steps = cyclic_ ? n : (first < n ? n - first : 0);
  const bool timed = options_.h2d_bytes_per_us > 0 && budget_ > 0;
  const double horizon_us =
      timed ? options_.lookahead_slack * static_cast<double>(budget_) / options_.h2d_bytes_per_us
            : 0;
  const double evict_horizon_us =
      timed ? options_.evict_ahead_slack * static_cast<double>(budget_) / options_.h2d_bytes_per_us
            : 0;
  uint64_t evict_peak = 0, evict_held = 0;
  if (!timed) max_steps = std::min<uint64_t>(max_steps, options_.default_lookahead_steps);
  const uint64_t memory_limit = budget_ > 0 ? budget_ : UINT64_MAX;
  // Prefetch and evict-ahead plan for the first part of the window only; the
  // rest protects what was planned before from being evicted ahead when the
  // window's end moves (Note [window hysteresis]). With a residency plan
  // nothing the plan keeps is evicted ahead, and the whole budget is planned.
  const double plan_fraction = Planned() ? 1.0 : options_.plan_fraction;
  const uint64_t plan_limit =
      budget_ > 0 ? static_cast<uint64_t>(static_cast<double>(budget_) * plan_fraction)
                  : UINT64_MAX;
  // Memory profile of the window (Note [prefetch lookahead]): `usage` is the
  // memory in use at the walk's current step by the window's blocks; `peak`
  // the highest usage from now to there. A resident or prefetched block holds
  // memory from now until its data dies, so it raises every point of the
  // prefix; a new block (or a demand fetch) holds memory from its access on.
  uint64_t usage = 0, peak = 0, held_resident = 0;
  // Note [residency plan]: with a plan, the resident blocks the walk has not
  // reached yet hold memory too (MIN keeps them), and prefetches fit beside
  // them (LifetimeOptions::prefetch_beside_resident); without one,
  // evict-ahead makes the room.
  auto held_outside = [&]() -> uint64_t {
    if (!Planned() || !options_.prefetch_beside_resident) return 0;
    return resident_bytes_ > held_resident ? resident_bytes_ - held_resident : 0;
  };
  bool prefetch_open = true;
  auto release_dead = [&](const std::vector<StepUse>& uses) {
    for (const StepUse& a : uses) {
      if (!a.dead_after || counted_[a.dense] != w.stamp) continue;
      usage -= std::min(usage, dense_[a.dense].bytes);
      counted_[a.dense] = 0;  // a later access (a rebirth) counts anew
    }
  };
  // The current step's blocks hold memory and are protected too.
  if (position_ >= 0 && (cyclic_ || static_cast<uint64_t>(position_) < n)) {
    const std::vector<StepUse>& uses = schedule_->uses_at(position_ % n, cyclic_);
    for (const StepUse& a : uses) {
      if (counted_[a.dense] == w.stamp) continue;
      counted_[a.dense] = stamps_[a.dense] = w.stamp;
      usage += dense_[a.dense].bytes;
      if (dense_[a.dense].resident) held_resident += dense_[a.dense].bytes;
    }
    peak = usage;
    release_dead(uses);
  }
  double t_us = 0;  // compute time from the end of the current step to step q
  for (uint64_t i = 0; i < max_steps; ++i) {
    if (timed && i >= 2 && t_us > horizon_us) break;
    const uint64_t q = first + i;
    const uint64_t p = cyclic_ ? q % n : q;
    const std::vector<StepUse>& uses = schedule_->uses_at(p, cyclic_);
    w.end = q;
    for (const StepUse& a : uses) {
      if (counted_[a.dense] == w.stamp) continue;
      const Block& b = dense_[a.dense];
      const bool first_access = stamps_[a.dense] != w.stamp;
      counted_[a.dense] = stamps_[a.dense] = w.stamp;
      usage += b.bytes;
      if (first_access && b.resident) {
        peak += b.bytes;  // already holds memory from now on
        held_resident += b.bytes;
      } else if (first_access && b.allocated && a.mode != AccessMode::kWrite && prefetch_open &&
                 peak + b.bytes + held_outside() <= plan_limit) {
        peak += b.bytes;  // prefetched now, holds memory from now on
        w.prefetch.push_back(PrefetchRequest{a.block, i + 1});
        w.prefetch_dense.push_back(a.dense);
      } else {
        // Needs memory from this step on: a new block, or a fetch that no
        // longer fits ahead of time (nothing later will, either).
        if (a.mode != AccessMode::kWrite && b.allocated && first_access) prefetch_open = false;
        peak = std::max(peak, usage);
      }
      if (prefetch_open) w.peak_shortfall = peak;
      if (prefetch_open && (!timed || t_us <= evict_horizon_us)) {
        evict_peak = peak;
        evict_held = held_resident;
      }
    }
    if (peak > memory_limit) break;
    release_dead(uses);
    const double d = schedule_->duration_us(p);
    t_us += d > 0 ? d : 0;
    if (timed && d <= 0 && i + 1 >= options_.default_lookahead_steps) break;
  }
  // What the planned part needs beyond the resident blocks it uses.
  w.peak_shortfall = w.peak_shortfall > held_resident ? w.peak_shortfall - held_resident : 0;
  w.evict_shortfall = evict_peak > evict_held ? evict_peak - evict_held : 0;
  return w;
}

std::vector<PrefetchRequest> Planner::Prefetch(uint64_t byte_limit) const {
  std::vector<PrefetchRequest> out;
  Prefetch(byte_limit, out);
  return out;
}

void Planner::Prefetch(uint64_t byte_limit, std::vector<PrefetchRequest>& out) const {
  out.clear();
  // Blocks have bytes > 0, so nothing fits in no room: skip the planning walk.
  if (byte_limit == 0) return;
  const Window& w = PlanWindow();
  uint64_t bytes = 0;
  for (size_t i = 0; i < w.prefetch.size(); ++i) {
    const Block& b = dense_[w.prefetch_dense[i]];  // window blocks are dense
    if (!b.allocated || b.resident) continue;
    if (bytes + b.bytes > byte_limit) break;
    bytes += b.bytes;
    out.push_back(w.prefetch[i]);
  }
}

std::vector<BlockId> Planner::EvictAhead(EvictablePredicate can_evict, uint64_t free_bytes) {
  Settle();
  if (Planned()) return EvictOffBlocks(can_evict);
  const Window& w = PlanWindow();
  std::vector<BlockId> out;
  if (w.evict_shortfall <= free_bytes) return out;
  uint64_t shortfall = w.evict_shortfall - free_bytes;
  for (auto it = victims_.rbegin(); it != victims_.rend() && shortfall > 0; ++it) {
    // Live blocks come in decreasing next use: past the window's end they
    // are outside it, and once one is inside, all the rest are.
    if (!(it->first & kDeadBit) && it->first <= w.end) break;
    if (((it->first & kDeadBit) && InWindow(it->second)) || !can_evict(it->second)) continue;
    out.push_back(it->second);
    shortfall -= std::min(shortfall, Find(it->second)->bytes);
  }
  return out;
}

// Note [residency plan]: every block in an off gap leaves as soon as the
// caller allows, and dead blocks the window does not touch again.
std::vector<BlockId> Planner::EvictOffBlocks(EvictablePredicate can_evict) {
  PlanWindow();
  std::vector<BlockId> out;
  for (auto it = victims_.rbegin(); it != victims_.rend(); ++it) {
    if ((it->first & (kDeadBit | kOffBit)) == 0) break;
    if (((it->first & kDeadBit) && InWindow(it->second)) || !can_evict(it->second)) continue;
    out.push_back(it->second);
  }
  return out;
}

bool Planner::IsDead(BlockId block) const {
  const Block* b = Find(block);
  return b != nullptr && b->allocated && Current(block, *b).dead;
}

bool Planner::NextAccessOverwrites(BlockId block) const {
  const Block* b = Find(block);
  if (b == nullptr || !b->allocated) return false;
  const Block c = Current(block, *b);
  return c.next != kNever && c.next_mode == AccessMode::kWrite;
}

std::optional<uint64_t> Planner::NextUseDistance(BlockId block) const {
  const Block* b = Find(block);
  if (b == nullptr || !b->allocated) return std::nullopt;
  const uint64_t next = Current(block, *b).next;
  if (next == kNever) return std::nullopt;
  return next - static_cast<uint64_t>(position_);
}

}  // namespace memvirt::policy::internal

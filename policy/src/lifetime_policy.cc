// The lifetime policy. See MakeLifetimePolicy() in policy.h.
//
// Note [learning the iteration]
//   Every step's block set is recorded. The recording of one iteration
//   becomes the schedule when an OnIterationMark() arrives, or, without
//   marks, when a step repeats the signature of the first recorded step (the
//   kernel sequence started over). From then on each step is matched against
//   the expected position of the schedule; a mismatch re-synchronizes to a
//   position with the same signature if there is one, otherwise the policy
//   falls back to LRU until the sequence is recognized again. An iteration
//   with mismatches replaces the schedule at the next mark; without marks, a
//   whole period out of sync restarts learning.
//
// Note [why an LRU shadow]
//   An embedded LRU receives every event, so that a fallback decision is
//   available at any moment without rebuilding state.
//
// Note [following without a recording]
//   The recording is read only to learn: by Detect() (no schedule yet) and
//   at an iteration mark (relearning after a mismatch). Once a schedule is
//   followed and no mark was ever seen, neither can happen before learning
//   restarts from an empty recording (the workload changed) or a first mark
//   arrives, whose recording would otherwise hold every step since the
//   schedule was adopted (and grow until max_iteration_steps). So in that
//   state steps are not recorded, and a step is first checked against the
//   expected position with the signature of its accesses as given: for a
//   step without duplicate blocks that is the signature of its merged form
//   (the signature is order-independent), and a step with duplicates counts
//   more accesses, so it fails the check and takes the general path. A
//   launch then costs the shadow LRU update, one signature and the
//   planner's Advance(), with no allocation.
//
// Note [repeated step]
//   A step with exactly the accesses of the previous step (same blocks in the
//   same order; e.g. back-to-back kernels over the same tensors), with no
//   alloc, free or residency event in between, leaves the shadow LRU as it
//   is (its blocks are already the most recent, in that order) and has the
//   previous step's signature: both are reused instead of recomputed.

#include <algorithm>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "memvirt/policy/policy.h"
#include "planner.h"
#include "schedule.h"

namespace memvirt::policy {
namespace {

using internal::Planner;
using internal::Schedule;

// Sorted by block, duplicates merged, in one allocation.
std::vector<BlockAccess> Merged(std::span<const BlockAccess> accesses) {
  std::vector<BlockAccess> v(accesses.begin(), accesses.end());
  std::sort(v.begin(), v.end(),
            [](const BlockAccess& a, const BlockAccess& b) { return a.block < b.block; });
  size_t kept = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (kept > 0 && v[kept - 1].block == v[i].block) {
      v[kept - 1].mode = internal::CombineModes(v[kept - 1].mode, v[i].mode);
    } else {
      v[kept++] = v[i];
    }
  }
  v.resize(kept);
  return v;
}

class LifetimePolicy final : public Policy {
 public:
  explicit LifetimePolicy(const LifetimeOptions& options)
      : options_(options), lru_(MakeLruPolicy()) {}

  std::string_view name() const override { return "lifetime"; }

  void OnAlloc(BlockId block, const BlockInfo& info) override {
    ++lru_epoch_;
    lru_->OnAlloc(block, info);
    blocks_[block] = Known{info.bytes, false};
    sizes_[block] = info.bytes;
    if (planner_) planner_->Alloc(block, info.bytes);
  }
  void OnFree(BlockId block) override {
    ++lru_epoch_;
    lru_->OnFree(block);
    blocks_.erase(block);
    if (planner_) planner_->Free(block);
  }
  void OnResident(BlockId block) override {
    ++lru_epoch_;
    lru_->OnResident(block);
    auto it = blocks_.find(block);
    if (it != blocks_.end()) it->second.resident = true;
    if (planner_) planner_->Resident(block);
  }
  void OnEvicted(BlockId block) override {
    ++lru_epoch_;
    lru_->OnEvicted(block);
    auto it = blocks_.find(block);
    if (it != blocks_.end()) it->second.resident = false;
    if (planner_) planner_->Evicted(block);
  }
  void OnBudgetChange(uint64_t device_bytes) override {
    budget_ = device_bytes;
    lru_->OnBudgetChange(device_bytes);
    if (planner_) planner_->SetBudget(device_bytes);
  }
  void OnStepDuration(Step step, double duration_us) override {
    for (auto it = recording_.rbegin(); it != recording_.rend(); ++it) {
      if (it->step == step) {
        it->duration_us = duration_us;
        return;
      }
      if (it->step < step) return;
    }
  }

  void OnAccess(Step step, std::span<const BlockAccess> accesses) override {
    if (!RepeatsLastStep(accesses)) {  // Note [repeated step]
      lru_->OnAccess(step, accesses);
      last_accesses_.assign(accesses.begin(), accesses.end());
      last_signature_ = internal::AccessSignature(accesses);
    }
    last_epoch_ = lru_epoch_;
    // The common case, kept small (Note [following without a recording]).
    if (planner_ != nullptr && !marks_seen_ && recording_.empty() &&
        FollowExpected(last_signature_)) {
      return;
    }
    OnAccessSlow(step, accesses);
  }

  // The rest of OnAccess(): re-synchronization, learning and recording. Out
  // of line so that the common case above stays a small function.
  [[gnu::noinline]] void OnAccessSlow(Step step, std::span<const BlockAccess> accesses) {
    if (planner_ != nullptr && !marks_seen_) {  // Note [following without a recording]
      if (!recording_.empty()) {
        recording_.clear();
        recorded_signatures_.clear();
      }
      if (FollowExpected(last_signature_)) return;
      std::vector<BlockAccess> merged = Merged(accesses);
      const uint64_t sig = internal::AccessSignature(merged);
      Follow(sig);
      if (planner_ != nullptr) return;
      // Learning restarted: this step opens the new recording.
      recording_.push_back(StepAccesses{step, std::move(merged), 0});
      recorded_signatures_.push_back(sig);
      return;
    }
    std::vector<BlockAccess> merged = Merged(accesses);
    const uint64_t sig = internal::AccessSignature(merged);
    if (planner_) {
      Follow(sig);
    } else if (!marks_seen_ && options_.detect_iterations) {
      Detect(sig);
    }
    if (recording_.size() >= options_.max_iteration_steps) {
      recording_.clear();
      recorded_signatures_.clear();
      candidate_period_ = 0;
      adopt_period_ = 0;
    }
    recording_.push_back(StepAccesses{step, std::move(merged), 0});
    recorded_signatures_.push_back(sig);
    if (adopt_period_ > 0) Adopt();
  }

  void OnIterationMark() override {
    marks_seen_ = true;
    if (!recording_.empty() && (!planner_ || mismatch_)) {
      Learn(std::move(recording_));
    }
    recording_.clear();
    recorded_signatures_.clear();
    candidate_period_ = 0;
    mismatch_ = false;
    if (planner_) {
      // Next expected step: position 0 of the next iteration.
      const int64_t n = static_cast<int64_t>(schedule_->size());
      position_ = ((position_ + 1 + n - 1) / n) * n - 1;
      if (position_ < n - 1) position_ = n - 1;
      planner_->Realign(position_);
      in_sync_ = true;
      out_of_sync_steps_ = 0;
    }
  }

  std::optional<BlockId> PickVictim(EvictablePredicate can_evict) override {
    if (Planning()) return planner_->PickVictim(can_evict);
    return lru_->PickVictim(can_evict);
  }
  std::optional<BlockId> PickVictimForPrefetch(EvictablePredicate can_evict,
                                               BlockId incoming) override {
    if (Planning()) return planner_->PickVictimForPrefetch(can_evict, incoming);
    return std::nullopt;
  }
  std::vector<PrefetchRequest> PrefetchCandidates(uint64_t byte_limit) override {
    std::vector<PrefetchRequest> out;
    PrefetchCandidatesInto(byte_limit, out);
    return out;
  }
  void PrefetchCandidatesInto(uint64_t byte_limit, std::vector<PrefetchRequest>& out) override {
    if (Planning()) {
      planner_->Prefetch(byte_limit, out);
    } else {
      out.clear();
    }
  }
  std::vector<BlockId> EvictAheadCandidates(EvictablePredicate can_evict,
                                            uint64_t free_bytes) override {
    if (Planning()) return planner_->EvictAhead(can_evict, free_bytes);
    return {};
  }
  bool IsDead(BlockId block) const override { return Planning() && planner_->IsDead(block); }
  bool NextAccessOverwrites(BlockId block) const override {
    return Planning() && planner_->NextAccessOverwrites(block);
  }
  std::optional<uint64_t> NextUseDistance(BlockId block) const override {
    if (Planning()) return planner_->NextUseDistance(block);
    return std::nullopt;
  }

 private:
  struct Known {
    uint64_t bytes = 0;
    bool resident = false;
  };

  bool Planning() const { return planner_ != nullptr && in_sync_; }

  // True if `accesses` equal the previous step's and no event changed the
  // shadow LRU since (Note [repeated step]).
  bool RepeatsLastStep(std::span<const BlockAccess> accesses) const {
    if (last_epoch_ != lru_epoch_ || accesses.size() != last_accesses_.size()) return false;
    for (size_t i = 0; i < accesses.size(); ++i) {
      if (accesses[i].block != last_accesses_[i].block ||
          accesses[i].mode != last_accesses_[i].mode) {
        return false;
      }
    }
    return true;
  }

  // Note [iteration detection]
  //   A step with the signature of the first recorded step proposes that the
  //   iteration is the recording so far; the proposal is adopted once the
  //   next min(kConfirmSteps, period) steps repeat the recording's start too
  //   (one repeated kernel is not a repeated iteration).
  static constexpr uint64_t kConfirmSteps = 4;

  void Detect(uint64_t sig) {
    const uint64_t index = recording_.size();  // index this step will get
    if (candidate_period_ > 0) {
      const uint64_t offset = index - candidate_period_;
      if (sig == recorded_signatures_[offset]) {
        if (offset + 1 >= std::min(kConfirmSteps, candidate_period_))
          adopt_period_ = candidate_period_;
        return;
      }
      candidate_period_ = 0;
    }
    if (index >= 2 && sig == recorded_signatures_[0]) candidate_period_ = index;
  }

  // Adopts recording_[0, period) as the iteration; the steps after it are
  // the start of the next one.
  void Adopt() {
    const uint64_t period = adopt_period_;
    adopt_period_ = 0;
    candidate_period_ = 0;
    const uint64_t done = recording_.size();
    std::vector<StepAccesses> iteration(recording_.begin(), recording_.begin() + period);
    recording_.erase(recording_.begin(), recording_.begin() + period);
    recorded_signatures_.erase(recorded_signatures_.begin(), recorded_signatures_.begin() + period);
    Learn(std::move(iteration));
    position_ = static_cast<int64_t>(done) - 1;
    planner_->Realign(position_);
    in_sync_ = true;
  }

  // position % schedule size, without a division when `position` follows
  // the one asked last (every launch asks for the next one).
  // REQUIRES: schedule_ non-null, position >= 0.
  int64_t PhaseOf(int64_t position) {
    const int64_t n = static_cast<int64_t>(schedule_->size());
    const int64_t p =
        position == phase_position_ + 1 ? (phase_ + 1 == n ? 0 : phase_ + 1) : position % n;
    phase_position_ = position;
    phase_ = p;
    return p;
  }

  void Learn(std::vector<StepAccesses> steps) {
    phase_position_ = INT64_MIN;  // a new schedule size
    schedule_ = std::make_shared<Schedule>(std::move(steps));
    planner_ = std::make_unique<Planner>(schedule_, /*cyclic=*/true, options_);
    planner_->SetBudget(budget_);
    // Deterministic registration order (the map's order is not).
    std::vector<BlockId> ids;
    ids.reserve(blocks_.size());
    for (const auto& [id, k] : blocks_) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    for (const auto& [id, bytes] : sizes_) planner_->RememberSize(id, bytes);
    for (BlockId id : ids) {
      planner_->Alloc(id, blocks_[id].bytes);
      if (blocks_[id].resident) planner_->Resident(id);
    }
  }

  // Advances to the expected position if the step's signature is the one
  // scheduled there. REQUIRES: planner_ non-null.
  bool FollowExpected(uint64_t sig) {
    const int64_t expected = position_ + 1;
    if (schedule_->signature(PhaseOf(expected)) != sig) return false;
    position_ = expected;
    planner_->Advance(position_);
    in_sync_ = true;
    out_of_sync_steps_ = 0;
    return true;
  }

  void Follow(uint64_t sig) {
    if (FollowExpected(sig)) return;
    const int64_t n = static_cast<int64_t>(schedule_->size());
    const int64_t expected = position_ + 1;
    const int64_t p = expected % n;
    mismatch_ = true;
    const std::vector<uint64_t>* candidates = schedule_->PositionsWithSignature(sig);
    if (candidates != nullptr && !candidates->empty()) {
      // The nearest matching position at or after the expected one.
      auto it = std::lower_bound(candidates->begin(), candidates->end(), static_cast<uint64_t>(p));
      const int64_t q = static_cast<int64_t>(it != candidates->end() ? *it : candidates->front());
      position_ = expected - p + q + (q < p ? n : 0);
      planner_->Realign(position_);
      in_sync_ = true;
      out_of_sync_steps_ = 0;
      return;
    }
    position_ = expected;
    in_sync_ = false;
    if (++out_of_sync_steps_ > n && !marks_seen_) {
      // The workload changed: learn again from scratch.
      planner_.reset();
      schedule_.reset();
      recording_.clear();
      recorded_signatures_.clear();
      out_of_sync_steps_ = 0;
    }
  }

  LifetimeOptions options_;
  std::unique_ptr<Policy> lru_;
  absl::flat_hash_map<BlockId, Known> blocks_;
  absl::flat_hash_map<BlockId, uint64_t> sizes_;  // every block ever allocated
  uint64_t budget_ = 0;

  std::vector<StepAccesses> recording_;
  std::vector<uint64_t> recorded_signatures_;
  uint64_t candidate_period_ = 0;  // proposed iteration length, 0 if none
  uint64_t adopt_period_ = 0;      // confirmed, to adopt after this step
  bool marks_seen_ = false;
  bool mismatch_ = false;

  std::shared_ptr<const Schedule> schedule_;
  std::unique_ptr<Planner> planner_;
  int64_t position_ = -1;
  // Note [repeated step]: the previous step, its signature (of the accesses
  // as given), and the event count when it was seen.
  std::vector<BlockAccess> last_accesses_;
  uint64_t last_signature_ = 0;
  uint64_t lru_epoch_ = 1;  // counts alloc, free and residency events
  uint64_t last_epoch_ = 0;
  int64_t phase_position_ = INT64_MIN;  // PhaseOf()'s memo
  int64_t phase_ = 0;
  bool in_sync_ = false;
  int64_t out_of_sync_steps_ = 0;
};

}  // namespace

std::unique_ptr<Policy> MakeLifetimePolicy(const LifetimeOptions& options) {
  return std::make_unique<LifetimePolicy>(options);
}

}  // namespace memvirt::policy

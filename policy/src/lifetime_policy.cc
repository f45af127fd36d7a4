// The lifetime policy. See MakeLifetimePolicy() in policy.h.
//
// Note [learning the iteration]
//   Every step's block set is recorded. The recording of one iteration
//   becomes the schedule when an OnIterationMark() arrives, or, without
//   marks, when the recording is found to repeat with some period (Note
//   [iteration detection]). From then on each step is matched against
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
//   The recording is read only to learn: by Detect() (no schedule yet, or a
//   detected one still on trial) and at an iteration mark (relearning after
//   a mismatch). Once a detected schedule has passed its trial and no mark
//   was ever seen, neither can happen before learning
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
//   previous step's signature: both are reused instead of recomputed. While
//   learning, such a step is recorded with the previous step's merged
//   accesses and signature (no sort, no hashing of the accesses; Note
//   [recording layout]).
//
// Note [recording layout]
//   A recorded step is a fixed-size entry (step, duration, signature, and a
//   slice of one shared array of merged accesses); a step that repeats the
//   previous recorded one shares that step's slice. A run of one repeated
//   launch (a loop of period 1, which detection never adopts: Note
//   [iteration detection]) is not even written out while it lasts: with no
//   schedule and no period being confirmed, the steps numbered on from
//   recording_.back() that repeat it are only counted (pending_repeats_),
//   which changes nothing detection could see, as such a step proposes no
//   period. They become entries of their own (FlushRepeats(), at once:
//   the launch that ends a long run pays for it) before anything else reads
//   or extends the recording, and count towards max_iteration_steps as
//   entries do. So the loop costs neither allocation nor memory per launch,
//   and every decision is the one a step-by-step recording gives. A run
//   also leaves its signature in last_index_ at the run's first index until
//   a step with another signature is recorded (Detect() knows the most
//   recent occurrence of the last recorded signature: the step before).
//   Schedules are built from the entries (StepAccesses) only when learned.

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

// Sorted by block, duplicates merged, into `v` (its capacity is reused).
void MergeInto(std::span<const BlockAccess> accesses, std::vector<BlockAccess>& v) {
  v.assign(accesses.begin(), accesses.end());
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
    if (pending_repeats_ > 0 && step > recording_.back().step) FlushRepeats();
    for (auto it = recording_.rbegin(); it != recording_.rend(); ++it) {
      if (it->step == step) {
        it->duration_us = duration_us;
        return;
      }
      if (it->step < step) return;
    }
  }

  void OnAccess(Step step, std::span<const BlockAccess> accesses) override {
    const bool repeat = RepeatsLastStep(accesses);
    if (!repeat) {  // Note [repeated step]
      lru_->OnAccess(step, accesses);
      last_accesses_.assign(accesses.begin(), accesses.end());
      last_signature_ = internal::AccessSignature(accesses);
    }
    last_epoch_ = lru_epoch_;
    const bool repeats_recorded = repeat && last_recorded_;
    last_recorded_ = false;
    // The common case, kept small (Note [following without a recording]).
    if (planner_ != nullptr && !marks_seen_ && recording_.empty() &&
        FollowExpected(last_signature_)) {
      return;
    }
    OnAccessSlow(step, accesses, repeats_recorded);
  }

  // The rest of OnAccess(): re-synchronization, learning and recording. Out
  // of line so that the common case above stays a small function.
  // `repeats_recorded`: the step repeats the previous one, which is
  // recording_.back() (Note [repeated step]).
  [[gnu::noinline]] void OnAccessSlow(Step step, std::span<const BlockAccess> accesses,
                                      bool repeats_recorded) {
    if (repeats_recorded && planner_ == nullptr && candidate_period_ == 0 &&
        step == recording_.back().step + pending_repeats_ + 1) {
      // Learning, a repeat of the last recorded step (a loop of period 1 stays
      // here): Detect() would find it one step after its signature's last
      // occurrence, which proposes nothing, so the step is only recorded
      // (Note [recording layout]: as a pending repeat).
      if (recording_.size() + pending_repeats_ < options_.max_iteration_steps) {
        ++pending_repeats_;
      } else {  // full: the recording starts over with this step
        const uint64_t sig = recording_.back().signature;
        ResetRecording();
        Record(step, sig, /*repeat=*/true, accesses);
      }
      last_recorded_ = true;
      return;
    }
    FlushRepeats();
    if (planner_ != nullptr && !marks_seen_ && !on_trial_) {
      // Note [following without a recording]
      if (!recording_.empty()) ResetRecording();
      if (FollowExpected(last_signature_)) return;
      MergeInto(accesses, merged_);
      const uint64_t sig = internal::AccessSignature(merged_);
      Follow(sig);
      if (planner_ != nullptr) return;
      // Learning restarted: this step opens the new recording.
      Record(step, sig, /*repeat=*/false, accesses);
      return;
    }
    // Note [repeated step]: the previous step's merged form and signature
    // are the last recorded ones.
    if (!repeats_recorded) MergeInto(accesses, merged_);  // else unused
    const uint64_t sig =
        repeats_recorded ? recording_.back().signature : internal::AccessSignature(merged_);
    if (planner_ != nullptr && on_trial_) {
      // A schedule on trial is followed while the recording goes on; the
      // first mismatch rejects it (see Note [iteration detection]).
      if (FollowExpected(sig)) {
        if (++trial_followed_ >= trial_length_ ||
            recording_.size() + 1 >= options_.max_iteration_steps) {
          on_trial_ = false;  // passed: from now on, no recording
          ReleaseRecording();
          return;
        }
        Record(step, sig, repeats_recorded, accesses);
        return;
      }
      Reject();
    }
    if (planner_) {
      Follow(sig);
    } else if (!marks_seen_ && options_.detect_iterations) {
      Detect(sig);
    }
    if (recording_.size() >= options_.max_iteration_steps) ResetRecording();
    Record(step, sig, repeats_recorded, accesses);
    if (adopt_period_ > 0) Adopt();
  }

  void OnIterationMark() override {
    FlushRepeats();
    marks_seen_ = true;
    if (on_trial_) {
      // A detected schedule on trial, and a recording that holds everything
      // since learning started: the marks take over from the next one.
      on_trial_ = false;
      planner_.reset();
      schedule_.reset();
      in_sync_ = false;
      ResetRecording();
    }
    if (!recording_.empty() && (!planner_ || mismatch_)) {
      Learn(RecordedSteps(0, recording_.size()));
    }
    ResetRecording();
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
  //   Without marks the iteration is found from the signatures alone. A
  //   program runs one-time set-up launches before its loop (fills of
  //   persistent tensors, initialization), any number of them, so the
  //   recording's first step need not recur; and an iteration may repeat one
  //   layer's steps several times, so the first recurrence of a signature
  //   need not be the iteration's.
  //
  //   Proposal: a step whose signature was recorded before proposes the
  //   distance to its most recent occurrence as the period p (at least 2; a
  //   rejected period only again for steps all after the one that rejected
  //   it). Confirmation: the next
  //   min(kConfirmSteps, p) - 1 steps repeat the steps p before them too (one
  //   repeated kernel is not a repeated iteration). The p steps before the
  //   proposing step become the schedule, on trial.
  //
  //   Trial: recording goes on, and the first step that is not the
  //   schedule's expected one rejects it: the schedule is dropped (back to
  //   LRU), its period is proposed again only for steps recorded after the
  //   rejecting one (a program's first iteration may differ from the next
  //   ones, e.g. where its allocator places buffers), and detection continues
  //   on the recording as it is (the set-up prefix and the rejected period's
  //   steps stay history). The schedule passes after following max(2p, steps
  //   recorded at adoption) steps in sequence: two periods, and as many steps
  //   again as the history that proposed it; from then on a mismatch
  //   re-synchronizes (Note [learning the iteration]). So an iteration `A L L L
  //   B` with a repeated layer L first proposes L's length; B (or the next A)
  //   rejects it, and the recurrence of a step outside the layers proposes the
  //   iteration, which follows without a mismatch. What is not told apart is an
  //   iteration repeating one layer so often that the layer's schedule passes
  //   its trial before a step outside the layers recurs.
  static constexpr uint64_t kConfirmSteps = 4;

  void Detect(uint64_t sig) {
    const uint64_t index = recording_.size();  // index this step will get
    if (candidate_period_ > 0) {
      if (sig == recording_[index - candidate_period_].signature) {
        if (++candidate_matched_ >= std::min(kConfirmSteps, candidate_period_))
          adopt_period_ = candidate_period_;
        return;
      }
      candidate_period_ = 0;
    }
    // Note [recording layout]: last_index_ may be behind for the last
    // recorded signature, whose most recent occurrence is the step before.
    if (index == 0 || sig == recording_.back().signature) return;  // period 1 at most
    auto it = last_index_.find(sig);
    if (it == last_index_.end()) return;
    const uint64_t period = index - it->second;
    if (period < 2) return;
    for (const Rejected& r : rejected_) {
      if (r.period == period && index - period < r.at) return;
    }
    candidate_period_ = period;
    candidate_start_ = index;
    candidate_matched_ = 1;
  }

  // Appends a step with signature `sig` to the recording (Note [recording
  // layout]). `repeat`: `accesses` repeat those of the previous step, which
  // is recording_.back() if the recording is not empty; otherwise merged_
  // holds the merged form of `accesses`.
  void Record(Step step, uint64_t sig, bool repeat, std::span<const BlockAccess> accesses) {
    const uint64_t index = recording_.size();
    if (repeat && index > 0) {
      const RecordedStep& last = recording_.back();
      recording_.push_back(RecordedStep{step, 0, sig, last.begin, last.count});
      last_recorded_ = true;
      return;  // last_index_ may stay behind for `sig`
    }
    if (repeat) MergeInto(accesses, merged_);
    if (index > 0 && recording_.back().signature != sig) {
      // Catch up with a run of the previous signature.
      last_index_[recording_.back().signature] = index - 1;
    }
    last_index_[sig] = index;
    recording_.push_back(RecordedStep{step, 0, sig, recorded_accesses_.size(),
                                      static_cast<uint32_t>(merged_.size())});
    recorded_accesses_.insert(recorded_accesses_.end(), merged_.begin(), merged_.end());
    last_recorded_ = true;
  }

  // Records the pending repeats of recording_.back() (Note [recording
  // layout]) as steps of their own, each sharing its accesses.
  void FlushRepeats() {
    if (pending_repeats_ == 0) return;
    const RecordedStep last = recording_.back();
    for (uint64_t i = 1; i <= pending_repeats_; ++i) {
      recording_.push_back(RecordedStep{last.step + i, 0, last.signature, last.begin, last.count});
    }
    pending_repeats_ = 0;
  }

  // The recorded steps [first, end) as a schedule's steps.
  std::vector<StepAccesses> RecordedSteps(uint64_t first, uint64_t end) const {
    std::vector<StepAccesses> steps;
    steps.reserve(end - first);
    for (uint64_t i = first; i < end; ++i) {
      const RecordedStep& r = recording_[i];
      const BlockAccess* a = recorded_accesses_.data() + r.begin;
      steps.push_back(
          StepAccesses{r.step, std::vector<BlockAccess>(a, a + r.count), r.duration_us});
    }
    return steps;
  }

  // Empties the recording and what detection inferred from it.
  void ResetRecording() {
    last_recorded_ = false;
    pending_repeats_ = 0;
    recording_.clear();
    recorded_accesses_.clear();
    last_index_.clear();
    rejected_.clear();
    candidate_period_ = 0;
    adopt_period_ = 0;
  }

  // ResetRecording(), and the recording's memory given back: for a schedule
  // that has passed its trial (nothing is recorded until learning restarts).
  void ReleaseRecording() {
    ResetRecording();
    std::vector<RecordedStep>().swap(recording_);
    std::vector<BlockAccess>().swap(recorded_accesses_);
  }

  // Adopts the period before the proposing step as the schedule, on trial
  // (Note [iteration detection]); the steps from the proposing one on are
  // the start of its next repetition.
  void Adopt() {
    const uint64_t period = adopt_period_;
    const uint64_t first = candidate_start_ - period;
    adopt_period_ = 0;
    candidate_period_ = 0;
    const uint64_t done = recording_.size();
    Learn(RecordedSteps(first, candidate_start_));
    position_ = static_cast<int64_t>(done - first) - 1;
    planner_->Realign(position_);
    in_sync_ = true;
    on_trial_ = true;
    trial_followed_ = 0;
    trial_length_ = std::max(2 * period, done);
  }

  // Drops the schedule on trial (Note [iteration detection]).
  void Reject() {
    rejected_.push_back(Rejected{schedule_->size(), recording_.size()});
    planner_.reset();
    schedule_.reset();
    on_trial_ = false;
    in_sync_ = false;
    mismatch_ = false;
    out_of_sync_steps_ = 0;
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
      ResetRecording();
      out_of_sync_steps_ = 0;
    }
  }

  LifetimeOptions options_;
  std::unique_ptr<Policy> lru_;
  absl::flat_hash_map<BlockId, Known> blocks_;
  absl::flat_hash_map<BlockId, uint64_t> sizes_;  // every block ever allocated
  uint64_t budget_ = 0;

  // Note [recording layout]
  struct RecordedStep {
    Step step = 0;
    double duration_us = 0;
    uint64_t signature = 0;
    uint64_t begin = 0;  // the merged accesses: recorded_accesses_[begin, +count)
    uint32_t count = 0;
  };
  std::vector<RecordedStep> recording_;
  std::vector<BlockAccess> recorded_accesses_;
  std::vector<BlockAccess> merged_;  // scratch: the step's merged accesses
  // Steps after recording_.back(), numbered on from its step, that repeat it
  // and are not yet in recording_ (Note [recording layout]).
  uint64_t pending_repeats_ = 0;
  // Note [iteration detection]: the recording's most recent index of each
  // signature, the proposed period (0 if none), the index of the step that
  // proposed it, how many steps confirmed it, a confirmed period to adopt
  // after this step, and the periods whose schedules were rejected.
  absl::flat_hash_map<uint64_t, uint64_t> last_index_;
  uint64_t candidate_period_ = 0;
  uint64_t candidate_start_ = 0;
  uint64_t candidate_matched_ = 0;
  uint64_t adopt_period_ = 0;
  struct Rejected {
    uint64_t period;
    uint64_t at;  // recording index of the step that rejected it
  };
  std::vector<Rejected> rejected_;  // few: one per rejection
  // A detected schedule on trial: steps followed so far, steps to pass.
  bool on_trial_ = false;
  uint64_t trial_followed_ = 0;
  uint64_t trial_length_ = 0;
  bool marks_seen_ = false;
  bool mismatch_ = false;

  std::shared_ptr<const Schedule> schedule_;
  std::unique_ptr<Planner> planner_;
  int64_t position_ = -1;
  // Note [repeated step]: the previous step, its signature (of the accesses
  // as given), and the event count when it was seen.
  std::vector<BlockAccess> last_accesses_;
  uint64_t last_signature_ = 0;
  // The previous step is recording_.back() (set by Record, cleared by each
  // OnAccess and by ResetRecording).
  bool last_recorded_ = false;
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

// Paging policies: events in, decisions out.
//
// A Policy decides which fixed-size device blocks (chunks) to evict, which to
// prefetch ahead of use, and whether a block's contents are dead (may be
// dropped instead of written back). It never touches memory, devices, files,
// clocks or threads: the caller (the shim, or the trace simulator) owns the
// mechanism and reports what happened through the On*() events.
//
// Thread safety: a Policy is NOT thread-safe. The caller serializes every call
// (one mutex around the policy is the intended use). Distinct Policy objects
// share no state.
//
// Ownership: factories return a std::unique_ptr owned by the caller. Spans and
// predicates passed in are only used during the call.
//
// Vocabulary:
//   BlockId  caller-chosen 64-bit name of a block (e.g. chunk index). Unique
//            among live blocks; may be reused after OnFree().
//   step     ordinal of a kernel launch (or any other access group). Strictly
//            increasing across OnAccess() calls; gaps are allowed.
//   resident the block has device memory committed to it (fetched, being
//            fetched, or freshly created on the device).
//
// Event protocol (REQUIRES, checked in debug builds only by the policies that
// can check them cheaply):
//   OnAlloc(b) before any other event naming b; OnFree(b) ends b's life.
//   OnResident(b) when the caller commits device memory for b (a demand fetch,
//   a prefetch it issued, or first touch); OnEvicted(b) when it releases it.
//   OnAccess(step, accesses) when a kernel that touches `accesses` is
//   launched, in launch order. The blocks need not be resident yet.
//   OnIterationMark() at a training-iteration boundary, if the caller knows
//   one (the lifetime policy also detects boundaries on its own).
//
// Note [what the caller must still guarantee]
//   PickVictim() only proposes; the eligibility predicate is the caller's
//   veto (the shim may only evict blocks whose last use has completed on the
//   device). A policy never returns a block the predicate rejected, and
//   never returns a non-resident block.
//
// Note [dead data]
//   A block is dead when its current contents will never be read again: the
//   next access overwrites it entirely (AccessMode::kWrite) or it is freed
//   first, or it is never accessed again. Evicting a dead block needs no write
//   back, and fetching a block whose next access is kWrite needs no copy. A
//   caller that cannot tell whole-block writes from partial ones reports
//   kReadWrite, which is always safe.

#ifndef MEMVIRT_POLICY_POLICY_H_
#define MEMVIRT_POLICY_POLICY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"

namespace memvirt::policy {

using BlockId = uint64_t;
using Step = uint64_t;

// What a block holds; a hint only. Policies may use it to break ties.
enum class BlockKind : uint8_t {
  kUnknown = 0,
  kWeight,
  kOptimizerState,
  kActivation,
  kGradient,
  kWorkspace,
  kOther,
};

struct BlockInfo {
  uint64_t bytes = 0;  // bytes of device memory the block occupies (> 0)
  BlockKind kind = BlockKind::kUnknown;
  bool persistent = false;  // lives across iterations (weights, optimizer state)
};

enum class AccessMode : uint8_t {
  kRead = 1,       // contents read, not modified
  kWrite = 2,      // contents entirely overwritten without being read first
  kReadWrite = 3,  // read and/or partially modified (the safe default)
};

struct BlockAccess {
  BlockId block = 0;
  AccessMode mode = AccessMode::kReadWrite;
};

// One entry per OnAccess() call, in order: what Belady/MIN is told about the
// future. `accesses` of entry i must equal what the i-th OnAccess() reports.
struct StepAccesses {
  Step step = 0;
  std::vector<BlockAccess> accesses;
  double duration_us = 0;  // expected duration of the step; 0 if unknown
};

// A block the policy wants brought in before it is needed.
struct PrefetchRequest {
  BlockId block = 0;
  uint64_t steps_ahead = 0;  // next use is this many steps after the current one (>= 1)
};

// Returns true if the caller allows `block` to be evicted now.
using EvictablePredicate = absl::FunctionRef<bool(BlockId)>;

class Policy {
 public:
  virtual ~Policy() = default;

  // Short stable name: "lru", "lifetime", "belady".
  virtual std::string_view name() const = 0;

  // ---- Events -------------------------------------------------------------
  virtual void OnAlloc(BlockId block, const BlockInfo& info) = 0;
  virtual void OnFree(BlockId block) = 0;
  // A kernel touching `accesses` was launched as step `step`.
  virtual void OnAccess(Step step, std::span<const BlockAccess> accesses) = 0;
  // Optional: measured or expected duration of a step, in microseconds. Lets
  // the lifetime policy size its prefetch lookahead. Default: ignored.
  virtual void OnStepDuration(Step /*step*/, double /*duration_us*/) {}
  virtual void OnIterationMark() = 0;
  // Device bytes the caller may keep resident from now on.
  virtual void OnBudgetChange(uint64_t device_bytes) = 0;
  virtual void OnResident(BlockId block) = 0;
  virtual void OnEvicted(BlockId block) = 0;

  // ---- Decisions ----------------------------------------------------------
  // A resident block to evict under memory pressure, or nullopt if no resident
  // block passes `can_evict`.
  virtual std::optional<BlockId> PickVictim(EvictablePredicate can_evict) = 0;

  // A resident block worth evicting to make room for prefetching `incoming`:
  // only one whose next use is strictly later than incoming's (never evict
  // something needed sooner than what is being brought in). Default: none.
  virtual std::optional<BlockId> PickVictimForPrefetch(EvictablePredicate /*can_evict*/,
                                                       BlockId /*incoming*/) {
    return std::nullopt;
  }

  // Non-resident blocks to fetch ahead of use, soonest need first, with total
  // bytes <= byte_limit. The caller issues them in order, possibly evicting
  // via PickVictimForPrefetch(), and reports OnResident() for each it issues.
  // Default: no prefetching (demand paging).
  virtual std::vector<PrefetchRequest> PrefetchCandidates(uint64_t /*byte_limit*/) { return {}; }
  // The same candidates, written into `out` (cleared first) so that a caller
  // asking on every launch can reuse one buffer instead of allocating.
  virtual void PrefetchCandidatesInto(uint64_t byte_limit, std::vector<PrefetchRequest>& out) {
    out = PrefetchCandidates(byte_limit);
  }

  // Resident blocks to evict now, ahead of need, so that the allocations and
  // prefetches the policy expects within its lookahead find memory without
  // waiting for a write back on the critical path: blocks not needed within
  // the lookahead, in eviction order, covering what the lookahead needs beyond
  // `free_bytes`. The caller evicts them (writing back those not dead).
  // Default: none (evict on demand only).
  virtual std::vector<BlockId> EvictAheadCandidates(EvictablePredicate /*can_evict*/,
                                                    uint64_t /*free_bytes*/) {
    return {};
  }

  // True if the block's current contents will never be read again (see
  // Note [dead data]): evict by dropping, no write back.
  virtual bool IsDead(BlockId block) const = 0;

  // True if the block's next access overwrites it entirely, so a fetch needs
  // no copy (only device memory). Default: false (always copy).
  virtual bool NextAccessOverwrites(BlockId /*block*/) const { return false; }

  // Steps from the current step until the block's next use; nullopt if the
  // policy does not know or the block is never used again. Used by callers to
  // order lower tiers (e.g. which host block to demote to NVMe).
  virtual std::optional<uint64_t> NextUseDistance(BlockId /*block*/) const { return std::nullopt; }
};

// LRU demand paging (what UVM-style systems do): evicts the least recently
// accessed eligible resident block, never prefetches, never declares data
// dead (the caller still skips the write back of clean or freed blocks).
std::unique_ptr<Policy> MakeLruPolicy();

struct LifetimeOptions {
  // Host-to-device bandwidth in bytes per microsecond (1 GB/s = 1000 B/us);
  // sizes the prefetch lookahead. <= 0 means "unknown": a fixed step window.
  double h2d_bytes_per_us = 0;
  // Lookahead when bandwidth or durations are unknown, in steps.
  uint64_t default_lookahead_steps = 64;
  // Extra safety factor on the computed lookahead (>= 1).
  double lookahead_slack = 1.5;
  // Share of the device budget the lookahead plans to fill with upcoming
  // blocks (prefetches and room for new ones); the rest of the window only
  // protects planned blocks from being evicted ahead. In (0, 1]. Not used
  // with a residency plan (plan_residency), which never evicts ahead what
  // it keeps: the whole budget is planned.
  double plan_fraction = 0.85;
  // Evict ahead only for what the window needs within this many times the
  // time the link needs to fill the budget (<= lookahead_slack): evicting
  // earlier picks victims before the blocks born meanwhile, which MIN would
  // rather evict, exist.
  double evict_ahead_slack = 0.2;
  // Once an iteration is learned, decide which data leaves the device by
  // running MIN offline on it, and only when by the lookahead (Note
  // [residency plan] in policy/src/residency_plan.h): write backs and
  // fetches are then MIN's, started early. Needs a budget (OnBudgetChange);
  // false: victims by farthest next use at decision time, evict ahead for
  // the window's shortfall (evict_ahead_slack).
  bool plan_residency = true;
  // With a residency plan: prefetch candidates fit beside every resident
  // block, within the budget, so that they never take the
  // memory that blocks born later in the window need (a caller that issues
  // every candidate it gets, such as memvirt-sim). false: the window counts
  // only the blocks it touches, and the candidates also serve callers that
  // stage lower tiers ahead of device room (the shim's spill prefetch; it
  // prefetches to the device only into free memory).
  bool prefetch_beside_resident = false;
  // Learn the iteration from the repeating kernel sequence when no
  // OnIterationMark() is given.
  bool detect_iterations = true;
  // Longest iteration the policy learns, in steps; a longer recording without
  // a detected repetition or mark is discarded and learning starts over (it
  // bounds the memory of the recording for non-periodic workloads).
  uint64_t max_iteration_steps = 1 << 20;
};

// The lifetime planner: learns the periodic access sequence of a training
// iteration, evicts the block with the farthest next use in the learned
// schedule, drops dead data, and prefetches upcoming uses ahead of time.
// Before an iteration has been learned it behaves like LRU.
std::unique_ptr<Policy> MakeLifetimePolicy(const LifetimeOptions& options = {});

// Belady/MIN with full knowledge of the future: entry i of `future` is what
// the i-th OnAccess() reports. Evicts the eligible resident block whose next
// use is farthest (never used again first), treats data as dead per Note
// [dead data], and plans prefetch and evict-ahead like the lifetime policy
// (for simulators). Used demand-only (a caller that never asks for prefetch
// or evict-ahead candidates) it is the classic MIN traffic bound.
std::unique_ptr<Policy> MakeBeladyPolicy(std::vector<StepAccesses> future,
                                         const LifetimeOptions& prefetch_options = {});

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_POLICY_H_

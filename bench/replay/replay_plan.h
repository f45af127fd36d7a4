// ReplayPlan: what memvirt-replay does for one iteration of a trace, with
// tensor sizes scaled: which tensors to allocate before each kernel, which
// to free after it, and each kernel's argument slots. Pure logic, no CUDA.
//
// Thread safety: plain data and a pure function.

#ifndef MEMVIRT_BENCH_REPLAY_REPLAY_PLAN_H_
#define MEMVIRT_BENCH_REPLAY_REPLAY_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "memvirt/trace/memtrace.h"

namespace memvirt::replay {

struct PlannedSlot {
  uint32_t tensor = 0;  // index into Trace::tensors
  bool write = false;   // false: verified read
};

struct PlannedKernel {
  double us = 0;                   // duration, already time-scaled
  std::vector<uint32_t> allocate;  // born before this kernel
  std::vector<PlannedSlot> slots;  // reads first, then writes
  std::vector<uint32_t> release;   // die after this kernel
};

struct ReplayPlan {
  std::vector<uint64_t> bytes;       // per tensor, scaled, multiple of 8, >= 8
  std::vector<bool> needs_init;      // first access is a read: fill at allocation
  std::vector<uint32_t> persistent;  // allocated once, before the first iteration
  std::vector<PlannedKernel> kernels;
  uint64_t peak_bytes = 0;  // scaled bytes live at once
  double ideal_us = 0;      // sum of kernel durations (one iteration)
};

// REQUIRES: scale > 0, time_scale > 0. Fails if a kernel touches more than
// `max_slots` slots (a tensor both read and written takes two).
absl::StatusOr<ReplayPlan> MakeReplayPlan(const trace::Trace& trace, double scale,
                                          double time_scale, int max_slots);

// The trace as memvirt-replay launches it, which is what the shim sees
// (memvirt-replay --predict-layout shim-mechanism): `scaled` (tensor bytes
// already scaled as in `plan`) plus the replay's launch counter (an 8-byte
// persistent tensor, first in the tensor list, touched by every launch),
// and a 0 us kernel writing each tensor that needs an initial fill, launched
// at its allocation: for persistent tensors once, in a prologue that also
// holds the counter's memset, and for the others before the kernel whose
// allocations they are, every iteration. Returns the trace and stores the
// prologue's kernel count (SimConfig::prologue_kernels) in `*prologue`.
trace::Trace LaunchedTrace(const trace::Trace& scaled, const ReplayPlan& plan, uint64_t* prologue);

}  // namespace memvirt::replay

#endif  // MEMVIRT_BENCH_REPLAY_REPLAY_PLAN_H_

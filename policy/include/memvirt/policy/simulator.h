// Trace-driven, discrete-event paging simulator (the engine of memvirt-sim).
//
// Model (docs/policy.md has the long form):
//   - Kernels run in trace order on one compute stream for `iterations`
//     passes over the trace; a kernel starts only when every block it reads
//     or writes is resident and its data has arrived.
//   - Four copy engines, each FIFO and one transfer at a time: H2D and D2H at
//     pcie bandwidth, SSD read and SSD write at ssd bandwidth. They overlap
//     each other and compute.
//   - Device memory holds `device_bytes`; freed or evicted memory becomes
//     reusable when the block's last kernel ended and its write back (if
//     any) finished.
//   - Evicting a dirty, non-dead block writes it back to host memory, or to
//     SSD (through the D2H engine, then the SSD write engine) when the host
//     tier is full; a host block with a farther next use (LRU: an older one)
//     is demoted to SSD first to keep the host tier for sooner needs.
//     Fetching from SSD goes through the SSD read engine, then H2D.
//   - Clean blocks keep their backing copy; a write invalidates it.
//   - Persistent tensors start in the host tier (SSD beyond its capacity);
//     other tensors are born at their first access with no data and die after
//     their explicit free or else after their last access in the iteration.
//   - Prefetch: at each kernel start the policy's PrefetchCandidates() are
//     issued in order, evicting only blocks it names via
//     PickVictimForPrefetch(). Demand fetches are issued when the previous
//     kernel ends. The belady policy runs demand-only unless
//     belady_lookahead: the traffic lower bound.
//   - shim_mechanism replaces the engines and the prefetch rules above with
//     the shim's synchronous paging (Note [shim mechanism] in simulator.cc).
//   - Reported: the last iteration (G10 times the second of two); ideal_us is
//     the compute sum of one iteration (what unlimited memory gives).
//
// Thread safety: Simulate() is reentrant; it shares no state between calls.
// Output is deterministic for a given trace and config.

#ifndef MEMVIRT_POLICY_SIMULATOR_H_
#define MEMVIRT_POLICY_SIMULATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "memvirt/trace/memtrace.h"

namespace memvirt::policy {

enum class PolicyKind { kLru, kLifetime, kBelady, kUvm };

// "lru" | "lifetime" | "belady" | "uvm".
absl::StatusOr<PolicyKind> ParsePolicyKind(std::string_view name);
std::string_view PolicyKindName(PolicyKind kind);

struct SimConfig {
  PolicyKind policy = PolicyKind::kLifetime;
  uint64_t device_bytes = 0;
  uint64_t host_bytes = 0;
  double pcie_gbps = 0;  // GB/s (1e9 bytes/s) per direction; > 0
  double ssd_gbps = 0;   // GB/s per direction; > 0
  uint64_t chunk_bytes = uint64_t{2} << 20;
  uint64_t small_granularity = 4096;
  int iterations = 2;
  // false: demand paging only (no prefetch, evict-ahead or host staging),
  // e.g. for the classic MIN traffic bound with the belady policy.
  bool prefetch = true;
  // Belady plans prefetch and evict-ahead like the lifetime policy only when
  // set; by default it runs demand-only, the traffic lower bound (Note
  // [Belady bound] in simulator.cc).
  bool belady_lookahead = false;
  // Lookahead tuning of the lifetime policy (and of Belady with lookahead);
  // see LifetimeOptions. Negative: the LifetimeOptions default.
  double lookahead_slack = -1;
  double plan_fraction = -1;
  double evict_ahead_slack = -1;
  // LifetimeOptions::plan_residency of the lifetime policy.
  bool plan_residency = true;
  // The uvm policy (Note [uvm model] in simulator.cc): fault-handling time
  // per batch of faulted pages, batch size, page size.
  double uvm_fault_latency_us = 5;
  uint64_t uvm_fault_batch_pages = 256;
  uint64_t uvm_page_bytes = 4096;
  // The uvm policy: a tensor born again while its pages are off the device
  // migrates them back with their old contents (what G10's Base UVM does
  // from its second iteration on, Note [G10 iterations] in simulator.cc),
  // instead of allocating them fresh (its first iteration).
  bool uvm_migrate_reborn = false;
  // Time the run as the shim pages (Note [shim mechanism] in simulator.cc):
  // demand page-ins at launch on one copy stream, evictions the host waits
  // for, cuMemUnmap synchronizing the device, prefetch only into free
  // memory, and the policy fed as the shim feeds it. Meant for a trace in
  // the shim's layout (ShimLayout()).
  bool shim_mechanism = false;
  // With shim_mechanism: host time of one cuMemMap or cuMemUnmap call, in us.
  double shim_remap_us = 0;
  // With shim_mechanism: the trace's first `prologue_kernels` kernels run
  // once, before the first iteration (a program's set-up, such as
  // memvirt-replay's initialization launches of persistent tensors, which
  // the shim's policy sees as steps); the iterations run the others. They
  // may touch persistent tensors only, which then start empty (not in the
  // host tier): the prologue fills them. Their time counts in no iteration.
  uint64_t prologue_kernels = 0;
};

struct IterationStats {
  double time_us = 0;
  double stall_us = 0;
  uint64_t h2d_bytes = 0;
  uint64_t d2h_bytes = 0;
  uint64_t ssd_read_bytes = 0;
  uint64_t ssd_write_bytes = 0;
  uint64_t demand_fetches = 0;
  uint64_t prefetches = 0;
  uint64_t evictions = 0;
  uint64_t evict_ahead = 0;  // evictions ahead of need (part of evictions)
  uint64_t dead_drops = 0;   // evictions of dirty blocks dropped as dead
  uint64_t staged = 0;       // SSD blocks promoted to the host tier ahead of use
  uint64_t faults = 0;       // uvm: pages faulted in (migrated or first touched)
  // Bytes written back in this iteration that were overwritten, freed or
  // dropped before being read back (waste), and those still unread at the
  // end of the simulation (read by a later iteration, if any).
  uint64_t write_back_unread_bytes = 0;
  uint64_t write_back_carried_bytes = 0;
};

struct SimResult {
  std::string policy;
  double ideal_us = 0;
  // The reported (last) iteration.
  IterationStats reported;
  double slowdown = 0;
  std::vector<IterationStats> per_iteration;
  uint64_t peak_live_bytes = 0;    // tensor bytes live at once (trace property)
  uint64_t peak_device_bytes = 0;  // same, in device bytes after block layout
  uint64_t max_kernel_bytes = 0;   // largest single-kernel working set (device bytes)
  uint64_t blocks = 0;
  uint64_t kernels = 0;
  // Note [time lower bound] in time_bound.h: no policy's iteration is
  // faster on this configuration.
  double time_lower_bound_us = 0;
};

// Whether the run prefetches, evicts ahead and stages (false for the default
// belady run: the demand-only traffic bound).
bool UsesLookahead(const SimConfig& config);

// REQUIRES: config.iterations >= 1, positive bandwidths and chunk.
// Fails with InvalidArgument for a bad config, FailedPrecondition if a
// kernel's working set does not fit in device memory.
absl::StatusOr<SimResult> Simulate(const trace::Trace& trace, const SimConfig& config);

// One JSON object (single line), fixed member order and number formatting.
std::string FormatResultJson(const SimResult& result, const SimConfig& config);

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_SIMULATOR_H_

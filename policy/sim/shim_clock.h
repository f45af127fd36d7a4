// ShimClock: the timing of the shim's paging mechanism, for memvirt-sim's
// shim mechanism mode (SimConfig::shim_mechanism, Note [shim mechanism] in
// simulator.cc).
//
// Three timelines: the host thread (it issues every operation), the compute
// stream (kernels in launch order) and the shim's one copy stream (page-ins
// and page-outs in enqueue order, one at a time, both directions). What the
// shim does with them (shim/core/shim_core.cc):
//   - a launch does not block the host; its kernel starts when the host
//     issued it, the previous kernel ended and the fills it waits for
//     (cuStreamWaitEvent) completed;
//   - a copy starts when the host enqueued it and the copy stream is idle;
//   - a page-out is waited for by the host (FinishPageOut) before the
//     chunk's mapping changes;
//   - cuMemUnmap does not wait for queued device work (Note [unmap is
//     immediate] in sim/src/api_vmm.cc, as a real driver): the shim itself
//     waits for what it must, a chunk's tracked uses (WaitChunkIdle) and its
//     page-out (FinishPageOut), which the caller models with WaitUntil();
//   - cuMemMap and cuMemUnmap each take `remap_us` of host time (the
//     simulated driver's MEMSIM_MAP_US).
//
// Thread safety: none; one simulation owns it. Pure arithmetic, no clock.

#ifndef MEMVIRT_POLICY_SIM_SHIM_CLOCK_H_
#define MEMVIRT_POLICY_SIM_SHIM_CLOCK_H_

#include <algorithm>
#include <cstdint>

namespace memvirt::policy {

class ShimClock {
 public:
  // REQUIRES: bytes_per_us > 0, remap_us >= 0.
  ShimClock(double bytes_per_us, double remap_us)
      : bytes_per_us_(bytes_per_us), remap_us_(remap_us) {}

  double host() const { return host_; }
  double compute_end() const { return compute_end_; }
  double copy_end() const { return copy_end_; }

  // The host blocks until `t` (an event it synchronizes on).
  void WaitUntil(double t) { host_ = std::max(host_, t); }
  // cuCtxSynchronize / cuStreamSynchronize of everything queued.
  void Drain() { host_ = std::max({host_, compute_end_, copy_end_}); }
  // cuMemUnmap: updates the page tables at once (no drain).
  void Unmap() { host_ += remap_us_; }
  void Map() { host_ += remap_us_; }
  // Enqueues a copy of `bytes` on the copy stream; returns its completion.
  double Copy(uint64_t bytes) {
    copy_end_ = std::max(host_, copy_end_) + static_cast<double>(bytes) / bytes_per_us_;
    return copy_end_;
  }
  // Launches a kernel of `us` that also waits for `ready`; returns its start.
  double Launch(double ready, double us) {
    const double start = std::max({host_, compute_end_, ready});
    compute_end_ = start + us;
    return start;
  }

 private:
  double bytes_per_us_;
  double remap_us_;
  double host_ = 0;
  double compute_end_ = 0;
  double copy_end_ = 0;
};

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_SIM_SHIM_CLOCK_H_

// The sides of one copy or memset that lie in other devices' reservations
// than the current context's (Note [cross-device copies]).
//
// Note [cross-device copies]
//   A copy or memset is issued in the current context (on its stream), but a
//   side may lie in another device's reservation: cuMemcpyPeer, or a UVA copy
//   between two devices' memory. The issuing core (Runtime::core()) makes the
//   sides in its own reservation resident, stream-ordered as usual. A side in
//   another core's reservation is made resident by that core, in that core's
//   context, with the host waiting for its fills: that core's events live in
//   its own context and cannot be recorded on the issuing stream. Such an
//   operation is made host-synchronous: after the driver call the hook waits
//   for the issuing stream, and only then closes that core's enqueue window
//   (Note [enqueue window] in stream_tracker.h), so the owning core never
//   takes the side's chunks for idle, and never evicts them, while the copy
//   may still use them. The mappings grant the issuing device access (Note
//   [peer access] in shim_core.h).
//
//   Such a call holds one core's enqueue window open while it enters another
//   core (and on-demand event records of a core wait for its open windows),
//   so two of them in opposite directions could each wait for the other's
//   window. A process-wide mutex therefore admits one cross-device copy at a
//   time; every other call closes its window before it enters another core,
//   so the holder always makes progress.
//
// Lock order: the cross-device mutex before any core's mutex.
//
// Thread safety: one object per hooked call, on the calling thread.
#ifndef MEMVIRT_SHIM_HOOKS_CROSS_DEVICE_H_
#define MEMVIRT_SHIM_HOOKS_CROSS_DEVICE_H_

#include <cuda.h>

#include <mutex>

#include "shim/core/shim_core.h"
#include "shim/hooks/runtime.h"

namespace memvirt::shim::hooks {

class OtherDeviceSides {
 public:
  // Makes every range in the reservation of a core other than `issuing` (null:
  // no core for the current device) resident in its own core. On failure
  // nothing is left open and the operation must not be issued.
  [[nodiscard]] CUresult Prepare(const Runtime& runtime, const ShimCore* issuing,
                                 const MemRange* ranges, int count);
  bool empty() const { return count_ == 0; }
  // After the driver call that returned `issued`: waits for `stream` if the
  // call succeeded (Note [cross-device copies]), then closes the cores'
  // enqueue windows. Returns `issued`, or the error of that wait.
  [[nodiscard]] CUresult Finish(const Runtime& runtime, CUresult issued, CUstream stream,
                                bool per_thread);

 private:
  static constexpr int kMaxSides = 4;
  struct Side {
    ShimCore* core = nullptr;
    ShimCore::Ticket ticket;
  };
  Side sides_[kMaxSides];
  int count_ = 0;
  std::unique_lock<std::mutex> serial_;  // the cross-device mutex, once a side is found
};

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_CROSS_DEVICE_H_

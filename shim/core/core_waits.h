// CoreWaits: the waits of one ShimCore operation as the pieces that decide
// to wait (Evictor, Residency) see them (Note [waits outside the lock] in
// shim_core.h): a wait is first offered to the core to defer; the core's
// public call then waits without its lock and runs the operation again. A
// wait the core does not defer is made at once, under its lock.
//
// Thread safety: implemented by the core and called under its mutex only.
#ifndef MEMVIRT_SHIM_CORE_CORE_WAITS_H_
#define MEMVIRT_SHIM_CORE_CORE_WAITS_H_

#include <cuda.h>

#include <cstdint>

namespace memvirt::shim {

class CoreWaits {
 public:
  // If the current operation defers its waits, records a wait for `chunk`'s
  // pending uses and returns true (the caller gives up instead of waiting);
  // false if it does not defer or nothing is pending.
  virtual bool DeferChunkIdle(uint32_t chunk) = 0;
  // The same for copy-stream sequence number `copy_seq`.
  virtual bool DeferCopyWait(uint64_t copy_seq) = 0;
  // Waits on the host for `chunk`'s uses (stats: host_waits).
  [[nodiscard]] virtual CUresult WaitChunkIdle(uint32_t chunk) = 0;
  // Whether the current operation deferred a wait (it is to run again).
  virtual bool WaitsDeferred() const = 0;

 protected:
  ~CoreWaits() = default;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CORE_WAITS_H_

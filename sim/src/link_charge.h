// Which link engines a copy or memset occupies, and for how many bytes.
//
// Note [host-backed transfers]: device work that reads or writes host memory crosses the
// device's link (PCIe): bytes read from host memory take its host-to-device direction, bytes
// written to host memory its device-to-host direction (Note [bandwidth model] in
// copy_engine.h). Host memory is plain host memory (any host pointer) and, whatever address
// reaches it, physical memory created at a HOST or HOST_NUMA location and mapped into a
// device's address space: a copy between device memory and such a mapping is a
// cuMemcpyDtoD by its addresses, but on a GPU it crosses PCIe exactly as a cuMemcpyHtoD or
// cuMemcpyDtoH does (this is how the shim pages its host tier). Hence:
//   - host-backed -> device memory: h2d; device memory -> host-backed: d2h; device memory ->
//     device memory (one device or peers): no link;
//   - host-backed -> host-backed with at least one end addressed as device memory (a copy
//     engine reads host memory and writes it back): both directions; between two plain host
//     pointers: no link (the driver copies on the CPU);
//   - a memset of host-backed memory: d2h of the device that runs it.
// The engines are those of the destination's device (the source's when the destination is a
// plain host pointer), as for the classic H2D and D2H copies. A copy that is partly
// host-backed (a range spanning device and host mappings) charges the host-backed share; for
// 2D copies the share of the rows' extent. Kernels are host functions without a model of
// their memory traffic, so their accesses to host-backed memory are not charged.
//
// Thread safety: thread-safe. The lookups take the address spaces' locks, and are skipped when
// the engines involved are unthrottled (the default).
#ifndef MEMSIM_SRC_LINK_CHARGE_H_
#define MEMSIM_SRC_LINK_CHARGE_H_

#include <cstddef>
#include <cstdint>

#include "copy_engine.h"
#include "copy_ops.h"

namespace memsim {

class Device;

struct LinkCharge {
  CopyEngine* h2d = nullptr;
  size_t h2d_bytes = 0;
  CopyEngine* d2h = nullptr;
  size_t d2h_bytes = 0;

  // Books the charged engines; returns the end of the later booked slot (now when nothing is
  // booked or the engines are unthrottled).
  CopyEngine::Clock::time_point Book() const;
  // True when a booked engine is throttled (the caller sleeps until Book()'s answer).
  bool throttled() const;
};

// The charge of copying `bytes` (REQUIRES: <= both extents) from [src.addr, + src_extent) to
// [dst.addr, + dst_extent).
LinkCharge ChargeOfCopy(const CopyEnd& dst, size_t dst_extent, const CopyEnd& src,
                        size_t src_extent, size_t bytes);

// The charge of `runner` writing `bytes` (REQUIRES: <= extent) into [dst.addr, + extent).
LinkCharge ChargeOfMemset(Device& runner, const CopyEnd& dst, size_t extent, size_t bytes);

}  // namespace memsim

#endif  // MEMSIM_SRC_LINK_CHARGE_H_

// A lower bound on the time of one training iteration under a device memory
// limit: what no paging policy can beat on the given links.
//
// Note [time lower bound]
//   Split the iteration into consecutive kernel windows. A window W takes at
//   least its compute time C(W). The data W reads without writing it first
//   (D(W): tensors it reads that already hold data when W starts: persistent
//   ones, or ones an earlier kernel of the iteration wrote) must be on the
//   device when read; at W's start at most `device` bytes are, so at least
//   D(W) - device bytes cross the host link during W, and at least
//   D(W) - device - host come from SSD (nothing else holds them). Likewise
//   the data W writes that is read after W (P(W): its next access after W
//   reads it; persistent tensors wrap to the next iteration) has no copy
//   off the device before W writes it; at W's end at most `device` bytes of
//   it are on the device, so at least P(W) - device bytes are written back
//   during W. So time(W) >= max(C(W), (D(W) - device) / pcie, (P(W) -
//   device) / pcie, (D(W) - device - host) / ssd), windows take disjoint
//   time, and the iteration takes at least the sum over any partition; the
//   bound is the largest such sum (dynamic programming over window ends).
//   It treats each term apart (one direction of the link, one tier at a
//   time) and ignores when within a window data can move, so it is a bound,
//   not a schedule.
//
// Thread safety: a pure function.

#ifndef MEMVIRT_POLICY_TIME_BOUND_H_
#define MEMVIRT_POLICY_TIME_BOUND_H_

#include <cstdint>

#include "memvirt/trace/memtrace.h"

namespace memvirt::policy {

// Microseconds; REQUIRES: pcie_gbps > 0, ssd_gbps > 0; tensor ids of the
// kernels exist in the trace (as ReadTrace validates). >= the sum of kernel
// durations.
double TimeLowerBoundUs(const trace::Trace& trace, uint64_t device_bytes, uint64_t host_bytes,
                        double pcie_gbps, double ssd_gbps);

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_TIME_BOUND_H_

// CoreStats: what one ShimCore has done and holds (ShimCore::stats()), in
// its own header so that the pieces of the core that count (PageOutPipeline,
// SpillManager) need not include shim_core.h.
//
// Thread safety: a plain struct; the core's copy is guarded by its mutex.
#ifndef MEMVIRT_SHIM_CORE_CORE_STATS_H_
#define MEMVIRT_SHIM_CORE_CORE_STATS_H_

#include <cstdint>

namespace memvirt::shim {

struct CoreStats {
  uint64_t launches = 0;
  uint64_t opaque_launches = 0;
  // Decoded launches that may reach memory through addresses the shim does
  // not see, fenced until they complete (Note [hidden reach]).
  uint64_t fenced_launches = 0;
  // Chunks backed by a host slot at allocation: no device chunk could be had
  // (Note [backed from allocation]).
  uint64_t backed_on_host_at_allocation = 0;
  // Kernels whose parameter layout was looked up (Note [parameter information]):
  uint32_t kernels_decoded_as_function = 0;  // by cuFuncGetParamInfo
  uint32_t kernels_decoded_as_kernel = 0;    // by cuKernelGetParamInfo (a CUkernel)
  uint32_t kernels_undecodable = 0;          // no layout: launched as opaque work
  uint64_t page_ins = 0;                     // chunks filled from the host tier
  uint64_t first_touches = 0;                // chunks backed without a copy
  uint64_t evictions = 0;                    // chunks copied to the host tier
  uint64_t cancelled_page_outs = 0;          // page-outs dropped because the chunk was used again
  uint64_t drops = 0;                        // freed chunks reclaimed without a copy
  uint64_t host_fallbacks = 0;  // chunks left in (or placed in) the host tier for an access
  uint64_t prefetches = 0;
  uint64_t demotions = 0;         // host chunks stored in the spill tier
  uint64_t demotion_scans = 0;    // chunk-table scans for demotion victims (Note [demotion queue])
  uint64_t promotions = 0;        // chunks brought back for an access
  uint64_t promotion_reads = 0;   // ... of which read the spill tier then (no load ahead)
  uint64_t spill_prefetches = 0;  // loads from the spill tier started ahead of use
  uint64_t spill_failures = 0;    // stores refused or loads that failed
  uint64_t demotions_superseded = 0;  // stored copies discarded: the chunk was used meanwhile
  uint32_t spilled_chunks = 0;        // chunks in the spill tier now (SpillManager's count)
  uint64_t host_waits = 0;            // times the host blocked on device work
  // Waits for another thread's enqueue window to close, made without the
  // core lock (Note [enqueue window] in stream_tracker.h).
  uint64_t window_waits = 0;
  // Times the core asked the other cores of its process for host slots they
  // held, and the bytes they gave back (Note [host slots of other cores] in
  // host_peers.h).
  uint64_t host_reclaims_asked = 0;
  uint64_t host_bytes_reclaimed = 0;
  uint64_t events_recorded = 0;
  uint32_t device_chunks_in_use = 0;
  uint32_t device_chunk_limit = 0;
  uint32_t device_chunks_peak = 0;  // the most device chunks in use at once
  uint32_t host_slots_in_use = 0;
  uint32_t host_slot_limit = 0;
  uint32_t committed_chunks = 0;
  uint64_t live_bytes = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CORE_STATS_H_

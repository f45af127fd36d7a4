// ShimCore: virtual device memory for one device of the process.
//
// A process has one core per device it allocates on (Note [one core per
// device]). Each core owns its VA reservation, the block allocator, the chunk table, physical
// chunks (device and host tier), stream sequence tracking, the policy, the
// page-outs in flight (PageOutPipeline, page_out_pipeline.h), eviction
// (Evictor, evictor.h), residency (Residency, residency.h) and the spill
// tier's demotions and promotions (SpillManager, spill_manager.h). The
// hook layer calls it around every intercepted driver call; it reaches the
// driver only through the injected Driver table.
//
// Thread safety: every public method is thread-safe (one internal mutex).
// Owns() may be used without the lock. The Before*() calls fill a Ticket, the
// operation's enqueue window (Note [enqueue window] in stream_tracker.h): the
// caller keeps it alive until the real driver call has returned, and its
// destructor closes the window.
//
// Lock order: a ControlPlane's locks before mu_. A control plane calls into
// the core (SetDeviceBudget, SetHostBudget, DemoteHostBytes, TakeUsage) from
// its own threads while it holds its own locks, so the core never calls a
// ControlPlane method (registering or removing a callback included) while it
// holds mu_: Create() registers after releasing it, ~ShimCore() removes the
// callbacks before taking it.
//
// Note [one core per device]
//   Each device gets its own core: reservation, budget, physical pool,
//   stream tracker, copy stream and policy, created in the context current at
//   the first allocation on that device (its primary context or another
//   context created on it) and serving every context of that device. The
//   hook layer (shim/hooks/runtime.h, Note [core routing]) sends allocations
//   and cuMemGetInfo to the current context's device, and frees, queries and
//   copies to the core whose reservation holds the address. Cores share no
//   state and no lock: nothing ever holds two cores' mutexes at once.
//
// Note [peer access]
//   Memory of one device is reached by others through peer copies
//   (cuMemcpyPeer, UVA copies between devices) and peer kernels. VMM mappings
//   carry their own access list (cuCtxEnablePeerAccess does not apply to
//   them), so every mapping of a core, device chunk or host slot, grants
//   read/write access to its device and to each device that can access it
//   (cuDeviceCanAccessPeer), as cuMemAlloc memory is reachable by peers once
//   peer access is enabled. A single-device process maps with one entry.
//
// Note [failed transitions]
//   A page transition maps, unmaps and copies, and any step can fail
//   (cuMemMap, cuMemSetAccess, cuMemUnmap, a copy, an event). The bytes stay
//   where they are until their new home is known to hold them, and the
//   operation that needed the transition fails with the driver's CUresult
//   instead of running on bytes that are not there:
//   * page-in (host tier -> device): a failed map or copy maps the host slot
//     back and releases the device chunk. The fills of one operation are
//     committed (host slots released once the copies completed, spill-tier
//     copies discarded) only once the launch stream, or the host, waits for
//     them; if the event, cuStreamWaitEvent and the host wait all fail,
//     every fill of the operation is undone (host slots mapped back, promoted
//     chunks returned to the spill tier) and the operation fails.
//   * page-out (device -> host tier): a failed copy or wait keeps the chunk
//     on the device; a failed remap maps the device chunk back.
//   * promotion and demotion (Note [spill tier]): as page-in and page-out; a
//     failed load or store leaves the chunk where it was (spill_manager.h).
//   * if putting a mapping back fails as well, the chunk stays in the host
//     tier marked `unmapped` (its bytes are in its host slot); the next
//     operation that reaches it, an opaque launch included, maps it first or
//     fails.
//
// Note [host mapping]
//   An evicted chunk is not left unmapped: its bytes are copied into a host
//   slot (physical memory created with CU_MEM_LOCATION_TYPE_HOST_NUMA) and
//   that slot is mapped at the chunk's own address. A kernel whose arguments
//   the shim cannot decode, a pointer stored inside device memory, or a graph
//   launch therefore never faults: at worst it reads host memory over the
//   interconnect. The cost is one extra cuMemMap/cuMemUnmap pair per page
//   transition and that "opaque" launches count as a use of every chunk (no
//   chunk they may touch is remapped until they completed).
//
// Note [residency before launch]
//   Before a launch, copy or memset, every chunk it can touch is made
//   device-resident: a free or evicted device chunk is mapped at the chunk's
//   address and, if the chunk held data in the host tier, filled on the
//   shim's non-blocking copy stream. The launch stream then waits on one
//   event recorded after the fills (cuStreamWaitEvent): the host never waits
//   on this path. Hits (already resident, fill complete) cost a table lookup
//   and a sequence-number store per chunk.
//
// Note [eviction]
//   Victims come from the policy, restricted to chunks whose last use on
//   every stream has completed (per-stream sequence numbers, batched events)
//   and that the current operation does not touch. When the operation is
//   enqueued on a stream (not captured), a chunk whose only uses not known
//   complete are earlier work on that same stream is a candidate as well:
//   the operation runs after that work anyway, so the host waits (before
//   the page-out, without the core lock) only for work the operation waits
//   for in any case, never for another stream's. Without it, which chunks
//   count as idle would depend on timing and on completion knowledge that
//   the batched events (stream_tracker.h) keep up to a batch of launches
//   stale, and a policy that plans its evictions (the lifetime policy, once
//   it has learned the iteration) would be steered off its plan to chunks it
//   needs sooner, a page-in each (docs/policy.md, calibration: BERT at 24Gi
//   scaled paged in 137 chunks per learned iteration instead of the plan's
//   89). Look-ahead page-outs take idle chunks only (the rule is a
//   VictimPicker's, victim_picker.h). Evictions are done in
//   batches: the device-to-host copies are enqueued together and the host
//   waits once before the mappings change (a mapping change is not stream
//   ordered). Freed chunks are reclaimed first, without a copy. On a large
//   budget a few more victims than the current operation needs are evicted
//   per wait (up to 8, then 16 under sustained pressure) so that the wait and
//   the copy setup are amortized; the policy's order makes those the chunks
//   least likely to be needed. The batch scales with the budget and never
//   speculates with more than 1/16 of it (Note [eviction batches] in
//   eviction_sizing.h): a small budget evicts one chunk per miss.
//
// Note [pipelined page-out]
//   From a budget of 512 chunks (Note [eviction batches]), after an eviction
//   batch the next one is started at once (its victims'
//   device-to-host copies are enqueued, no wait) and finished at the next
//   eviction, when its copies have usually completed: the copy stream always
//   has work queued and the host rarely waits for a copy it just enqueued.
//   A chunk whose page-out is in flight stays mapped on the device and is
//   not a victim candidate; if an operation touches it meanwhile the page-out
//   is cancelled (the copy is discarded, its host slot released after it
//   completes). Opaque launches and the next eviction finish the batch. Work
//   the shim cannot see (pass-through copies, pointers stored in device
//   memory) that writes such a chunk while its copy runs can lose that
//   write, as with a synchronous eviction, only over a longer window. The
//   moves in flight are a PageOutPipeline's (page_out_pipeline.h); the core
//   decides when to start and finish them.
//
// Note [spill tier]
//   With a spill tier (the daemon's NVMe tier, control_plane.h) a full host
//   tier is not the end: host chunks whose last use has completed are
//   demoted, farthest expected next use first (the policy's prefetch
//   candidates last, otherwise least recently touched first): copied to a
//   staging buffer, stored, their slots unmapped and freed (residence
//   kNvme). A kNvme chunk has nothing mapped at its address, so it is
//   promoted before any decodable use (loaded into a staging buffer, copied
//   into a device chunk, or a host slot if the device is full), and an
//   opaque launch promotes every such chunk first or fails with
//   CUDA_ERROR_OUT_OF_MEMORY. Promotions the policy predicts are started
//   ahead of use (StartLoad) on slow paths and installed into free host
//   slots when they finish, so a prefetched chunk costs a host-to-device
//   copy, not an NVMe read, when it is used. A failed load fails the
//   operation with CUDA_ERROR_ECC_UNCORRECTABLE (the data is unreadable);
//   nothing is ever silently replaced. Demotions run only while a caller
//   needs a host slot (they wait for the store, without mu_ where Note
//   [demotion outside the lock] in spill_manager.h allows), never on the
//   launch fast path. The demotions, promotions and loads ahead are a SpillManager's
//   (spill_manager.h, with Note [demotion queue]); the core decides when
//   they run.
//
// Note [waits outside the lock]
//   An eviction that finds every candidate still in use must wait for a
//   victim's last uses, and one that pages out must wait for its copies (or
//   for the previous batch's: Note [pipelined page-out]). Launches and copies
//   (BeforeLaunch, BeforeOpaque, BeforeAccess, BeforeReferences,
//   BeforeGraphLaunch) do not make those waits with mu_ held: they run with
//   waits deferred, so such an eviction records what it would wait for (the
//   victim's uses, or the copy-stream sequence number that covers the page-out
//   copies) and fails instead, Residency::PageIn does not fall back to the host tier for
//   it, and the operation unwinds as any failed operation does (Note [failed
//   transitions]: chunks already filled stay filled, nothing is enqueued). The
//   public call then takes held events for those uses (Note [held events] in
//   stream_tracker.h), releases mu_, synchronizes the events, takes mu_ again
//   and runs the operation again from the start, which now finds the victim
//   idle or the copies complete. The repeat does not count the launch again
//   nor tell the policy of the access again. Meanwhile other threads use the
//   core: the application's other streams keep being fed, and work this thread
//   waits for may depend on work another thread has yet to enqueue. After
//   kMaxOutsideWaits repeats, or when an unlocked wait fails, the operation
//   runs once more with waits made under the lock, as before, so that it ends
//   and reports the driver's error. A host slot that a page-in copy still
//   reads (slot_releases_) is waited for the same way when no other slot is
//   free (AcquireHost), a lower device budget (SetDeviceBudget) or physical
//   memory the application creates itself (OnAppPhysicalCreate) waits for
//   its victims so, and Alloc defers its wait for pending frees when the
//   address space is full (AllocLocked) and the waits of backing the new
//   block (BackNewBlock: the repeat backs the rest of the block the first
//   attempt allocated). A host slot that only a demotion to the spill tier
//   can free starts one (DeferDemotion, call_.deferred.demotion): the public
//   call waits for its staging copies and stores it without mu_, then
//   finishes it (Note [demotion outside the lock] in spill_manager.h). A promotion from the spill
//   tier whose load is still running (the NVMe read) leaves it running in its staging buffer and
//   fails (SpillOwner::DeferLoadWait, call_.deferred.loads); the public call waits for it with
//   SpillTier::WaitLoad() without mu_, and the repeat takes the loaded buffer as one loaded ahead.
//   A promotion that finds every staging buffer busy defers its wait for one the same way: for
//   the oldest copy to the device (SpillOwner::DeferCopyWait) or for a load ahead it gives up;
//   so does a demotion the operation starts (DeferDemotion) for that copy, and
//   a demotion the control plane asks for (DemoteHostChunksOutsideLock).
//   A use on a stream whose enqueue window another thread holds open cannot be covered by an event
//   yet: StreamTracker::Hold() hands back a WindowWait, made without mu_ like the event waits (Note
//   [enqueue window] in stream_tracker.h). cuMemUnmap and cuMemExportToShareableHandle of the
//   application's handles (AppUnmap, AppExport) wait for the chunks' work
//   so too (SettleChunks), and so does cuMemMap (AppMap, BeginForeignMap) for
//   what a range still holds from a release that failed earlier (a
//   dead-listed chunk, DropRangeBacking); AppMap defers the waits of backing
//   the mapped chunks as Alloc does. Other waits still happen under mu_
//   (docs/architecture.md, "Inside one core").
#ifndef MEMVIRT_SHIM_CORE_SHIM_CORE_H_
#define MEMVIRT_SHIM_CORE_SHIM_CORE_H_

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shim/core/alloc_event_log.h"
#include "shim/core/app_vmm_book.h"
#include "shim/core/block_allocator.h"
#include "shim/core/chunk_table.h"
#include "shim/core/chunk_uses.h"
#include "shim/core/control_plane.h"
#include "shim/core/core_stats.h"
#include "shim/core/core_waits.h"
#include "shim/core/deferred_waits.h"
#include "shim/core/eviction_sizing.h"
#include "shim/core/evictor.h"
#include "shim/core/fill_batch.h"
#include "shim/core/freed_chunks.h"
#include "shim/core/graph_walk.h"
#include "shim/core/host_ledger.h"
#include "shim/core/host_peers.h"
#include "shim/core/host_slot_releases.h"
#include "shim/core/mem_range.h"
#include "shim/core/overflow_ledger.h"
#include "shim/core/page_out_pipeline.h"
#include "shim/core/param_layout.h"
#include "shim/core/pending_frees.h"
#include "shim/core/physical_pool.h"
#include "shim/core/pointer_attributes.h"
#include "shim/core/residency.h"
#include "shim/core/residency_policy.h"
#include "shim/core/spill_manager.h"
#include "shim/core/spill_tier.h"
#include "shim/core/stream_tracker.h"
#include "shim/core/thread_annotations.h"
#include "shim/core/touch_set.h"
#include "shim/core/victim_picker.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

struct CoreOptions {
  uint64_t device_budget = 0;  // 0: 90% of the device's free memory at creation
  uint64_t host_budget = 0;    // 0: half of the physical RAM
  // The process's host budget, shared with the cores of its other devices
  // (Note [shared host budget] in host_ledger.h); not owned, outlives the
  // core. Null: a budget of the core's own.
  HostLedger* host_ledger = nullptr;
  // Admission beyond the device budgets, shared likewise (Note [shared
  // admission] in overflow_ledger.h); not owned, outlives the core.
  // REQUIRES: bound to `host_ledger`; null exactly when it is (the core then
  // keeps one of its own).
  OverflowLedger* overflow_ledger = nullptr;
  // The other cores sharing `host_ledger`, asked for host slots when they
  // hold the budget (Note [host slots of other cores] in host_peers.h); not
  // owned, outlives the core. Null: never asked.
  HostPeers* host_peers = nullptr;
  uint64_t va_bytes = 0;  // 0: Note [reservation size] in shim_core.cc
  uint32_t event_batch = 32;
  uint32_t event_pace = 512;  // Note [event pacing] in stream_tracker.h; 0 = off
  // The smallest device budget (chunks) with a look-ahead page-out (Note
  // [eviction batches]); below 512 the bound on speculation does not hold.
  uint32_t lookahead_min_chunks = kLookaheadMinChunks;
  std::string policy = "lifetime";
  bool hidden_reach_all = false;  // MEMSHIM_HIDDEN_REACH=all (Note [hidden reach])
};

class ShimCore {
 public:
  // Creates the core in the calling thread's current context. REQUIRES: a
  // current context; `driver` and `control` outlive the core.
  static CUresult Create(const Driver* driver, const CoreOptions& options, ControlPlane* control,
                         std::unique_ptr<ShimCore>* out);
  ~ShimCore();
  ShimCore(const ShimCore&) = delete;
  ShimCore& operator=(const ShimCore&) = delete;

  // True if `ptr` lies in the shim's reservation (lock-free).
  bool Owns(CUdeviceptr ptr) const { return ptr - base_ < va_bytes_; }
  CUdeviceptr base() const { return base_; }
  // The context the core was created in and its device (lock-free; fixed at
  // creation).
  CUcontext context() const { return context_; }
  CUdevice device() const { return device_; }
  uint64_t va_bytes() const { return va_bytes_; }

  // ---- Memory management --------------------------------------------------
  CUresult Alloc(CUdeviceptr* ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  CUresult AllocPitch(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height,
                      unsigned element_bytes) MEMSHIM_EXCLUDES(mu_);
  // REQUIRES: Owns(ptr). CUDA_ERROR_INVALID_VALUE if ptr is not a live block.
  // The address is reused only after work that may still use the block has
  // completed (its memory stays mapped meanwhile).
  CUresult Free(CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);
  // Stream-ordered free: the block is reused only after `stream` passed this
  // point. REQUIRES: Owns(ptr).
  CUresult FreeAsync(CUdeviceptr ptr, CUstream stream, bool per_thread) MEMSHIM_EXCLUDES(mu_);
  // Virtual capacity: total = device + host budget (+ spill capacity), free =
  // what the next allocation may commit (Note [shared admission]).
  CUresult GetInfo(size_t* free, size_t* total) MEMSHIM_EXCLUDES(mu_);
  CUresult GetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);
  // cuPointerGetAttribute for an owned pointer (Note [pointer attributes] in
  // pointer_attributes.h): CUDA_ERROR_INVALID_VALUE if `ptr` is not in a
  // live block. REQUIRES: Owns(ptr).
  CUresult PointerAttribute(CUpointer_attribute attribute, void* data, CUdeviceptr ptr)
      MEMSHIM_EXCLUDES(mu_);
  // cuPointerGetAttributes for an owned pointer: every entry written (zero
  // where an attribute does not apply or `ptr` is not in a live block), or
  // CUDA_ERROR_INVALID_VALUE with nothing written for a malformed request.
  // REQUIRES: Owns(ptr).
  CUresult PointerAttributes(unsigned count, const CUpointer_attribute* attributes, void** data,
                             CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);

  // ---- Pinning for export (Note [pinned blocks], shim_core_pin.cc) ---------
  // The device chunks holding a pinned block, in address order.
  struct PinnedBlock {
    CUdeviceptr chunk_base = 0;                        // address of the block's first chunk
    uint64_t offset = 0;                               // the block's start within that chunk
    uint64_t bytes = 0;                                // the block's size as allocated
    std::vector<CUmemGenericAllocationHandle> chunks;  // their physical handles
  };
  // Makes the live block that starts at `ptr` device-resident (the host
  // waits for its fills) and keeps every chunk of it on the device until a
  // matching UnpinBlock(); pins nest. CUDA_ERROR_INVALID_VALUE if `ptr` is
  // not the start of a live block, CUDA_ERROR_OUT_OF_MEMORY if the device
  // budget cannot hold it beside what is pinned already. REQUIRES: Owns(ptr);
  // the core's context is current (context()).
  CUresult PinBlock(CUdeviceptr ptr, PinnedBlock* out) MEMSHIM_EXCLUDES(mu_);
  // Undoes one PinBlock() that returned `pinned`.
  void UnpinBlock(const PinnedBlock& pinned) MEMSHIM_EXCLUDES(mu_);

  // ---- Residency ----------------------------------------------------------
  // Held by the hook across its real driver call (move-only; closes on
  // destruction).
  using Ticket = EnqueueWindow;
  // Before cuLaunchKernel/Ex/Cooperative: decodes the arguments and makes
  // what they reach resident, stream-ordered before the launch.
  CUresult BeforeLaunch(CUfunction function, void** params, void** extra, CUstream stream,
                        bool per_thread, Ticket* ticket) MEMSHIM_EXCLUDES(mu_);
  // Before copies and memsets. `synchronous`: the operation blocks the host
  // (cuMemcpy, cuMemsetD8, ...), so fills are awaited on the host.
  // CUDA_ERROR_INVALID_VALUE, with nothing done, if a range that starts in
  // the reservation does not lie within one live block (Note [copy ranges]).
  //
  // Note [copy ranges]
  //   The driver refuses (CUDA_ERROR_INVALID_VALUE) a copy or memset whose
  //   device range runs past the end of the cuMemAlloc allocation it starts
  //   in. Under the shim every allocation lives in one reservation whose
  //   neighbouring chunks are mapped, so the driver would see one valid range
  //   and overwrite the next allocation (or, for a range that wraps the
  //   address space, fault and poison the context). The shim therefore checks
  //   each decoded range against its allocator and answers as the driver
  //   does. A range the hooks cannot express (a length or 2D/3D extent that
  //   overflows) arrives with bytes = UINT64_MAX and is refused the same way.
  CUresult BeforeAccess(const MemRange* ranges, int count, CUstream stream, bool per_thread,
                        bool synchronous, Ticket* ticket) MEMSHIM_EXCLUDES(mu_);
  // After the application writes `bytes` host bytes at `src` to `dst` (a
  // host-to-device copy): notes whether they hold addresses of live blocks
  // (Note [hidden reach] in shim_core_hidden_reach.cc).
  void OnHostWrite(CUdeviceptr dst, const void* src, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // The same for `rows` rows of `width` bytes (2D/3D copies from host memory):
  // row r goes from src + r * src_pitch to dst + r * dst_pitch.
  void OnHostWriteRows(CUdeviceptr dst, uint64_t dst_pitch, const void* src, uint64_t src_pitch,
                       uint64_t width, uint64_t rows) MEMSHIM_EXCLUDES(mu_);
  // After a device-to-device copy from [src, src + src_bytes) to
  // [dst, dst + dst_bytes) (1D, or the spans of a 2D/3D copy): the
  // destination holds addresses if the source may (Note [hidden reach]).
  void OnDeviceCopy(CUdeviceptr dst, uint64_t dst_bytes, CUdeviceptr src, uint64_t src_bytes)
      MEMSHIM_EXCLUDES(mu_);
  // Note [unsafe calls during capture] (relaxed_capture_mode.h):
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED where the driver would refuse a potentially unsafe call
  // (cuMemAlloc, cuMemFree) of the calling thread in its current capture interaction mode, with the
  // driver's side effects; CUDA_SUCCESS otherwise.
  CUresult CheckUnsafeCall() MEMSHIM_EXCLUDES(mu_);
  // Before work whose reach is unknown (graph launches the shim cannot decode):
  // see Note [host mapping].
  CUresult BeforeOpaque(CUstream stream, bool per_thread, Ticket* ticket) MEMSHIM_EXCLUDES(mu_);

  // ---- Graphs (Note [graph residency], shim_core_graph.cc) -----------------
  // After a successful cuGraphInstantiate*: walks `graph` with the driver
  // (without the core lock: Note [graph planning outside the lock]) and
  // records, for `exec`, the device memory its nodes reference (replacing
  // anything recorded for that handle before). REQUIRES: `graph` is not
  // destroyed or changed until it returns.
  void OnGraphInstantiate(CUgraphExec exec, CUgraph graph) MEMSHIM_EXCLUDES(mu_);
  // Before cuGraphExecDestroy or a change of `exec`'s parameters: forgets
  // `exec`; an exec with no record is launched as opaque work.
  void OnGraphExecForget(CUgraphExec exec) MEMSHIM_EXCLUDES(mu_);
  // Before cuGraphLaunch: makes the memory recorded for `exec` resident,
  // stream-ordered before the launch; without a decodable record it is
  // BeforeOpaque().
  CUresult BeforeGraphLaunch(CUgraphExec exec, CUstream stream, bool per_thread, Ticket* ticket)
      MEMSHIM_EXCLUDES(mu_);
  // Before work that may touch exactly the blocks that the 8-byte argument
  // words `words` point into (as kernel arguments are decoded) and the byte
  // ranges `ranges`: makes them resident, stream-ordered, like BeforeLaunch().
  CUresult BeforeReferences(const uint64_t* words, size_t num_words, const MemRange* ranges,
                            size_t num_ranges, CUstream stream, bool per_thread, Ticket* ticket)
      MEMSHIM_EXCLUDES(mu_);
  // True while `stream` is being captured into a graph (cheap while no
  // capture is active).
  bool StreamCapturing(CUstream stream, bool per_thread) MEMSHIM_EXCLUDES(mu_);
  struct GraphPlanInfo {
    bool known = false;      // instantiated while the core existed
    bool decodable = false;  // launches use the recorded references
    size_t nodes = 0, words = 0, ranges = 0;
    uint64_t launches = 0, page_ins = 0;
  };
  // Test-only: what is recorded for `exec`.
  GraphPlanInfo TEST_GraphPlanOf(CUgraphExec exec) MEMSHIM_EXCLUDES(mu_);

  // ---- Streams, capture, budgets -------------------------------------------
  void OnStreamDestroy(CUstream stream, bool per_thread) MEMSHIM_EXCLUDES(mu_);
  void OnCaptureBegin(CUstream stream, bool per_thread) MEMSHIM_EXCLUDES(mu_);
  void OnCaptureEnd() MEMSHIM_EXCLUDES(mu_);
  // ---- Application VMM (Note [application VMM], shim_core_app_vmm.cc) ------
  // Virtual allocation handles the core hands out for the application's
  // cuMemCreate of device memory: a tag in the top 16 bits, the device in the
  // next 8, a sequence number below (never a driver handle: those are
  // addresses of driver objects).
  static constexpr uint64_t kVirtualHandleTag = 0x5356ull << 48;
  static bool IsVirtualHandle(CUmemGenericAllocationHandle h) {
    return (h & (0xffffull << 48)) == kVirtualHandleTag;
  }
  static CUdevice VirtualHandleDevice(CUmemGenericAllocationHandle h) {
    return static_cast<CUdevice>((h >> 40) & 0xff);
  }
  // cuMemCreate: a virtual handle of `bytes` (a multiple of the chunk) with
  // `prop` (device-located on this core's device), holding that much of the
  // virtual capacity until it is freed. CUDA_ERROR_OUT_OF_MEMORY beyond the
  // capacity.
  CUresult AppCreate(uint64_t bytes, const CUmemAllocationProp& prop,
                     CUmemGenericAllocationHandle* handle) MEMSHIM_EXCLUDES(mu_);
  // cuMemRelease of a virtual handle: CUDA_ERROR_INVALID_VALUE if unknown.
  CUresult AppRelease(CUmemGenericAllocationHandle handle) MEMSHIM_EXCLUDES(mu_);
  // cuMemAddressReserve served from the reservation (whole chunks, aligned
  // as asked): CUDA_ERROR_OUT_OF_MEMORY if no free range holds it.
  CUresult AppReserve(uint64_t bytes, uint64_t alignment, CUdeviceptr* ptr) MEMSHIM_EXCLUDES(mu_);
  // cuMemAddressFree of a range AppReserve() gave out: CUDA_ERROR_INVALID_VALUE
  // unless (ptr, bytes) names one, or while something is mapped in it.
  CUresult AppAddressFree(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // cuMemMap of a virtual handle: the range becomes a block of the core,
  // backed and paged like cuMemAlloc memory. REQUIRES: Owns(ptr).
  CUresult AppMap(CUdeviceptr ptr, uint64_t bytes, uint64_t offset,
                  CUmemGenericAllocationHandle handle) MEMSHIM_EXCLUDES(mu_);
  // cuMemMap of a driver handle into a range AppReserve() gave out: Begin
  // frees whatever the core still has mapped there and marks the chunks the
  // driver's (kForeign); End(false) undoes that after a failed map.
  CUresult BeginForeignMap(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  void EndForeignMap(CUdeviceptr ptr, uint64_t bytes, bool mapped) MEMSHIM_EXCLUDES(mu_);
  // Whether [ptr, ptr + bytes) is all kForeign (the driver's mapping: the
  // hooks forward), and, after a successful forwarded cuMemUnmap, marks it
  // reserved again.
  bool IsForeign(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  void OnForeignUnmap(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // cuMemUnmap of whole virtual-handle mappings (waits for work using them,
  // as the driver's unmap does; their data is discarded).
  CUresult AppUnmap(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // cuMemSetAccess on virtual-handle mappings: validated; the core's
  // mappings already grant read/write to the device and its peers.
  CUresult AppSetAccess(CUdeviceptr ptr, uint64_t bytes, const CUmemAccessDesc* desc, size_t count)
      MEMSHIM_EXCLUDES(mu_);
  // cuMemExportToShareableHandle of a virtual handle (Note [exported
  // handles]): the handle becomes driver memory, pinned, and that is
  // exported.
  CUresult AppExport(void* shareable, CUmemGenericAllocationHandle handle,
                     CUmemAllocationHandleType type, unsigned long long flags)
      MEMSHIM_EXCLUDES(mu_);
  // cuMemRetainAllocationHandle on a virtual-handle mapping.
  CUresult AppRetain(CUmemGenericAllocationHandle* handle, CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);
  // cuMemGetAllocationPropertiesFromHandle of a virtual handle.
  CUresult AppProperties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle)
      MEMSHIM_EXCLUDES(mu_);
  // True if `ptr` is in a live block the application mapped itself (no
  // cuMemFree, no legacy IPC: the driver refuses both on VMM memory).
  bool IsAppMapped(CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);

  // Physical memory the application creates itself through the VMM API and
  // the core does not page (a driver handle): it is pinned on the device and
  // reduces the shim's device budget.
  void OnAppPhysicalCreate(CUmemGenericAllocationHandle handle, uint64_t bytes)
      MEMSHIM_EXCLUDES(mu_);
  void OnAppPhysicalRelease(CUmemGenericAllocationHandle handle) MEMSHIM_EXCLUDES(mu_);
  void SetDeviceBudget(uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // Host-tier budget (at most the size given at creation): chunks beyond it
  // are demoted to the spill tier where possible (Note [spill tier]).
  void SetHostBudget(uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // Moves at least `bytes` of host-tier data to the spill tier if it can;
  // returns the bytes moved.
  uint64_t DemoteHostBytes(uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // Gives back at least `bytes` of the (shared) host budget if it can: slots
  // whose page-in copies completed, host chunks demoted to the spill tier,
  // then idle host chunks moved into free device chunks (no eviction); returns
  // the bytes given back. For another core of the process (Note [host slots
  // of other cores] in host_peers.h); waits only for this core's copy stream
  // and spill tier.
  uint64_t GiveBackHostBytes(uint64_t bytes) MEMSHIM_EXCLUDES(mu_);
  // Releases the blocks freed with work pending whose work is known complete
  // now (a poll, no wait); true if it released any. For another core of the
  // process (Note [frees of other cores] in host_peers.h).
  bool ReleaseCompletedFrees() MEMSHIM_EXCLUDES(mu_);
  // Tests and memvirt-bench only: waits for all tracked work and finishes the
  // page-out batch, with mu_ held (no interposed call makes this wait).
  CUresult TEST_Synchronize() MEMSHIM_EXCLUDES(mu_);

  CoreStats stats() MEMSHIM_EXCLUDES(mu_);
  // Usage for the control plane; drains the allocation events logged since
  // the previous call. Events are logged only once this has been called.
  UsageReport TakeUsage() MEMSHIM_EXCLUDES(mu_);
  // Test-only: the residence of the chunk holding `ptr`.
  Residence TEST_ResidenceOf(CUdeviceptr ptr) MEMSHIM_EXCLUDES(mu_);

 private:
  ShimCore(const Driver* driver, ControlPlane* control);

  // Alloc() under mu_, run by RunWithWaitsOutsideLock: only its wait for
  // pending frees is deferred (Note [waits outside the lock]).
  // The block an attempt of one Alloc() call allocated, whose backing a
  // repeat goes on with (count 0: none yet). Local to the call.
  struct AllocBacking {
    uint64_t offset = 0;
    uint32_t first = 0;
    uint32_t count = 0;
  };
  [[nodiscard]] CUresult AllocLocked(CUdeviceptr* ptr, uint64_t bytes, AllocBacking* backing)
      MEMSHIM_REQUIRES(mu_);
  // Note [backed from allocation]: backs *backing's chunks; with `may_defer`,
  // an eviction that must wait defers it (CUDA_ERROR_NOT_READY; the repeat
  // backs the rest). On success the block is the allocation.
  [[nodiscard]] CUresult BackNewBlock(CUdeviceptr* ptr, uint64_t bytes, bool may_defer,
                                      AllocBacking* backing) MEMSHIM_REQUIRES(mu_);
  // BeforeLaunch() under mu_, run by RunWithWaitsOutsideLock.
  [[nodiscard]] CUresult LaunchLocked(CUfunction function, void** params, void** extra,
                                      CUstream stream, bool per_thread, Ticket* ticket)
      MEMSHIM_REQUIRES(mu_);

  // Note [segment windows] in touch_set.cc: the window of an application
  // VMM block made resident per argument word is device_limit / this.
  static constexpr uint32_t kSegmentWindowDivisor = 16;
  // Note [copy ranges]: false if `range` starts in the reservation but does
  // not lie within one live block.
  bool WithinOneBlock(const MemRange& range) MEMSHIM_REQUIRES(mu_);

  // Residency mechanism: residency_->MakeResident() for the current
  // operation (call_.repeating passed).
  [[nodiscard]] CUresult MakeResident(uint32_t stream, bool host_wait, bool capturing,
                                      Ticket* ticket) MEMSHIM_REQUIRES(mu_) {
    return residency_->MakeResident(stream, host_wait, capturing, call_.repeating, ticket);
  }
  // A host slot: a free one, else one of a dead chunk, else the slot a copy
  // still reads (slot_releases_) once that copy completed, else one freed by
  // demoting host chunks. With waits deferred, CUDA_ERROR_NOT_READY instead
  // of waiting for that copy (Note [waits outside the lock]).
  [[nodiscard]] CUresult AcquireHost(uint32_t* slot) MEMSHIM_REQUIRES(mu_);
  // freed_->ReclaimOne(): true if a chunk was released.
  bool ReclaimFreed(bool device, bool host) MEMSHIM_REQUIRES(mu_);
  // uses_->WaitIdle(), counted as a host wait.
  [[nodiscard]] CUresult WaitChunkIdle(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // Note [waits outside the lock]: if the current operation defers its
  // waits, records `chunk`'s uses in call_.deferred.uses and returns true (the
  // caller fails instead of waiting); false otherwise.
  bool DeferWaitChunkIdle(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // Appends (stream, seq) to call_.deferred.uses unless it is known complete;
  // true if it did.
  bool DeferUse(uint32_t stream, uint64_t seq) MEMSHIM_REQUIRES(mu_);
  // DeferUse() for copy-stream sequence number `copy_seq`.
  bool DeferCopyWait(uint64_t copy_seq) MEMSHIM_REQUIRES(mu_);
  // If the current operation defers its waits and other cores hold host
  // slots of the shared budget, records that `chunks` slots are to be asked
  // of them (Note [host slots of other cores]) and returns true.
  bool DeferHostReclaim(uint32_t chunks) MEMSHIM_REQUIRES(mu_);
  // If the other cores were not asked yet in this public call, records that
  // their completed frees are to be settled (Note [frees of other cores]) and
  // returns true. REQUIRES: the call runs with waits deferred.
  bool DeferPeerFrees() MEMSHIM_REQUIRES(mu_);
  // Runs `op` (an operation of a public call, REQUIRES mu_) under mu_ with
  // waits deferred, waiting outside the lock and repeating it as Note
  // [waits outside the lock] says; returns its result.
  template <typename Op>
  CUresult RunWithWaitsOutsideLock(Op op) MEMSHIM_EXCLUDES(mu_);
  // The same for a caller that holds mu_ already (a control-plane call):
  // mu_ is released only while it waits.
  template <typename Op>
  CUresult RepeatWithWaitsOutsideLock(Op op) MEMSHIM_REQUIRES(mu_);
  // Its slow path: holds events for call_.deferred.uses, releases mu_,
  // synchronizes them and waits for the spill tier's call_.deferred.loads, and
  // takes mu_ again (both lists cleared). False if an event could not be held
  // or a wait failed.
  bool WaitForDeferred() MEMSHIM_REQUIRES(mu_);
  // Whether the operation being run deferred a wait.
  bool WaitsDeferred() const MEMSHIM_REQUIRES(mu_) { return call_.deferred.any(); }
  // Forgets the deferred waits: the operation found a way that needs none
  // (a load left running stays in its staging buffer, taken later as one
  // started ahead; a demotion started is given up, its chunks stay).
  void DropDeferredWaits() MEMSHIM_REQUIRES(mu_) {
    DeferredWaits dropped = call_.deferred.Take();
    if (!dropped.demotion.empty()) FinishDemotion(&dropped.demotion);
  }
  static constexpr uint32_t kMaxOutsideWaits = 16;
  void ProcessDeferred() MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] CUresult BackAllOwned() MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] CUresult OpaqueLocked(uint32_t stream, bool capturing, Ticket* ticket)
      MEMSHIM_REQUIRES(mu_);
  // Note [hidden reach] (shim_core_hidden_reach.cc): whether a decoded launch,
  // whose chunks were gathered (touch_), may reach memory it does not name.
  // `layout` is null for a launch without parameters or with `extra_buffer`.
  // kNamed: nothing hidden; kAddresses: it reads memory that holds addresses
  // of known blocks (their chunks are hidden_target); kUnknown: an address may
  // be hidden in its arguments (an `extra` buffer, a structure).
  enum class Reach { kNamed, kAddresses, kUnknown };
  // Inline for the common case, where nothing can be hidden: no chunk holds
  // addresses, none were written outside the reservation, no
  // MEMSHIM_HIDDEN_REACH=all, no `extra` buffer and no parameter wider than
  // a word.
  Reach HiddenReach(const ParamLayout* layout, void** params, bool extra_buffer)
      MEMSHIM_REQUIRES(mu_) {
    if (!extra_buffer && !hidden_reach_all_ && !external_addresses_ && address_chunks_ == 0 &&
        (layout == nullptr || !layout->aggregates)) {
      return Reach::kNamed;
    }
    return HiddenReachSlow(layout, params, extra_buffer);
  }
  Reach HiddenReachSlow(const ParamLayout* layout, void** params, bool extra_buffer)
      MEMSHIM_REQUIRES(mu_);
  // kAddresses if a chunk of touch_ holds addresses or a module variable may;
  // with hidden_reach_all_, always at least kAddresses, after marking the
  // blocks of touch_ as hidden targets.
  Reach TouchedReach() MEMSHIM_REQUIRES(mu_);
  // Marks the blocks whose addresses are among the aligned words of
  // [data, data + bytes) as hidden targets; true if there was one.
  bool MarkTargetsIn(const char* data, uint64_t bytes) MEMSHIM_REQUIRES(mu_);
  void MarkTargetBlock(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // Marks the live chunks of [dst, dst + bytes) (in the reservation) as
  // holding addresses.
  void MarkAddressChunks(CUdeviceptr dst, uint64_t bytes) MEMSHIM_REQUIRES(mu_);
  bool RangeHoldsAddresses(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_REQUIRES(mu_);
  // A parameter of more than 8 bytes without a plain address of a live block.
  bool HidesAnAddress(const ParamLayout& layout, void* const* params) MEMSHIM_REQUIRES(mu_);
  // A decoded launch with hidden reach: resident as decoded, and fenced.
  [[nodiscard]] CUresult FencedLocked(uint32_t stream, bool capturing, Reach reach, Ticket* ticket)
      MEMSHIM_REQUIRES(mu_);
  // Note [backed from allocation]: backs each unbacked chunk of
  // [first, first + count) as a first use would (device, else host).
  void BackAtAllocation(uint32_t first, uint32_t count) MEMSHIM_REQUIRES(mu_);
  bool IsCapturing(CUstream handle) MEMSHIM_REQUIRES(mu_);
  void OnChunksCommitted(uint32_t first, uint32_t count) MEMSHIM_REQUIRES(mu_);
  void OnChunksFreed(uint32_t first, uint32_t count) MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] CUresult FreeLocked(uint64_t offset) MEMSHIM_REQUIRES(mu_);
  void EnforceDeviceLimit() MEMSHIM_REQUIRES(mu_);
  // EnforceDeviceLimit() for RunWithWaitsOutsideLock: CUDA_ERROR_NOT_READY
  // if an eviction deferred a wait (and is to be repeated), else success.
  [[nodiscard]] CUresult EnforceDeviceLimitOrDefer() MEMSHIM_REQUIRES(mu_);

  // Spill tier (Note [spill tier]): spill_'s calls, their results applied to
  // the core (fills_, demotions_outside_).
  // Demotes up to `max` (at most one batch) host chunks; false if none moved.
  bool DemoteHostChunks(uint32_t max) MEMSHIM_REQUIRES(mu_);
  // The same, with the waits for a staging buffer (Note [waits outside the
  // lock]), for the staging copies and the stores made without mu_ (Note
  // [demotion outside the lock] in spill_manager.h): the
  // core's other users go on meanwhile. REQUIRES: no operation is being
  // prepared (the control-plane calls), as others change the core's
  // per-operation state while mu_ is released.
  bool DemoteHostChunksOutsideLock(uint32_t max) MEMSHIM_REQUIRES(mu_);
  // Note [waits outside the lock]: starts a demotion that the public call
  // finishes without mu_ (call_.deferred.demotion); if none can start while
  // other threads' batches are outside the lock, waits for one of them to
  // finish instead (call_.deferred.demotion_wait); a staging buffer's copy to the
  // device that a batch needs is waited for the same way (call_.deferred.uses).
  // False if none of these.
  bool DeferDemotion(uint32_t max) MEMSHIM_REQUIRES(mu_);
  // Chunks in the spill tier now (0 without one).
  uint32_t SpilledChunks() const MEMSHIM_REQUIRES(mu_) {
    return spill_ != nullptr ? spill_->spilled_chunks() : 0;
  }
  // Holds an event for `batch`'s staging copies (null if they completed);
  // false if none could be recorded.
  bool HoldDemotionCopies(const SpillManager::DemotionBatch& batch, CUevent* event)
      MEMSHIM_REQUIRES(mu_);
  // Without mu_: waits for `event` and stores *batch; stores nothing and
  // returns false if the hold (`held` false) or the wait failed (its chunks
  // then stay in host memory).
  [[nodiscard]] bool StoreWithoutLock(bool held, CUevent event, SpillManager::DemotionBatch* batch)
      MEMSHIM_EXCLUDES(mu_);
  // spill_->FinishDemotion(), counted as a finished batch
  // (demotions_finished_); clears *batch. Returns the chunks moved.
  uint32_t FinishDemotion(SpillManager::DemotionBatch* batch) MEMSHIM_REQUIRES(mu_);
  // Moves up to `max` idle host chunks into free device chunks (never
  // evicting), waits for their copies without mu_ and releases their host
  // slots (GiveBackHostBytes). REQUIRES: no operation is being prepared (a
  // control-plane call), as others run while mu_ is released.
  void MoveHostChunksToFreeDevice(uint32_t max) MEMSHIM_REQUIRES(mu_);
  // Demotion and promotion to and from the spill tier (spill_manager.h);
  // null without a usable tier. Created with page_out_.
  std::unique_ptr<SpillManager> spill_ MEMSHIM_GUARDED_BY(mu_);
  // The core's side for spill_: ChunkIdle(), AcquireDevice() (which may
  // evict) and AcquireHost(). Called only from spill_, under mu_.
  class SpillOwner final : public SpillManager::Owner {
   public:
    explicit SpillOwner(ShimCore* core) : core_(core) {}
    bool ChunkIdle(uint32_t chunk) override;
    CUresult AcquireDevice(uint32_t* index) override;
    CUresult AcquireHost(uint32_t* slot) override;
    bool DeferLoadWait(uint32_t slot) override;
    bool DeferCopyWait(uint64_t copy_seq) override;
    uint64_t Fences() override;

   private:
    ShimCore* const core_;
  };
  SpillOwner spill_owner_{this};

  const Driver* const driver_;
  ControlPlane* const control_;
  CUcontext context_ = nullptr;
  CUdevice device_ = 0;
  CUdeviceptr base_ = 0;
  uint64_t va_bytes_ = 0;
  CUstream copy_stream_ = nullptr;
  // The spill tier spill_ uses (null without one); set at creation. Its
  // WaitLoad() is called without mu_ (Note [waits outside the lock]).
  SpillTier* spill_tier_ = nullptr;
  // CoreOptions::host_peers; asked only without mu_ (WaitForDeferred).
  HostPeers* host_peers_ = nullptr;

  mutable Mutex mu_;
  // The overflow ledger when none is shared (before allocator_, which
  // charges it until it is destroyed).
  std::unique_ptr<OverflowLedger> own_overflow_;
  // The ledger the allocator charges (own_overflow_ or the shared one), and
  // the spill chunks this core holds back in it (Note [shared admission]).
  OverflowLedger* overflow_ MEMSHIM_GUARDED_BY(mu_) = nullptr;
  uint32_t spill_reserve_ MEMSHIM_GUARDED_BY(mu_) = 0;
  ChunkTable table_ MEMSHIM_GUARDED_BY(mu_);
  std::unique_ptr<BlockAllocator> allocator_ MEMSHIM_GUARDED_BY(mu_);
  std::unique_ptr<PhysicalPool> pool_ MEMSHIM_GUARDED_BY(mu_);
  std::unique_ptr<StreamTracker> tracker_ MEMSHIM_GUARDED_BY(mu_);
  // Which work may still use each chunk, and the fences (Note [chunk uses]).
  std::unique_ptr<ChunkUses> uses_ MEMSHIM_GUARDED_BY(mu_);
  std::unique_ptr<ResidencyPolicy> policy_ MEMSHIM_GUARDED_BY(mu_);
  uint32_t copy_index_ MEMSHIM_GUARDED_BY(mu_) = 0;
  uint32_t device_budget_chunks_ MEMSHIM_GUARDED_BY(mu_) = 0;
  uint64_t app_pinned_bytes_ MEMSHIM_GUARDED_BY(mu_) = 0;
  // An export whose copies into driver memory were issued and not yet waited
  // for (Note [exports in flight]). `staging`: where `real` is mapped for the
  // copies (0: not mapped); `issue_result`: the first error issuing them.
  struct ExportInFlight {
    CUmemGenericAllocationHandle handle = 0;
    CUmemGenericAllocationHandle real = 0;
    CUdeviceptr staging = 0;
    uint64_t bytes = 0;
    uint64_t copy_seq = 0;
    CUresult issue_result = CUDA_SUCCESS;
    std::vector<std::pair<uint32_t, AppMapping>> mappings;  // (first chunk, mapping)
  };
  std::vector<ExportInFlight> exports_ MEMSHIM_GUARDED_BY(mu_);
  // Starts moving a virtual handle's bytes into driver memory of its own
  // (Note [exported handles]): settles its chunks, pins its size in the device
  // budget, issues the copies and adds the export to exports_.
  // CUDA_ERROR_NOT_READY when a wait was deferred (nothing started).
  [[nodiscard]] CUresult StartExport(CUmemGenericAllocationHandle handle, VirtualHandle* v)
      MEMSHIM_REQUIRES(mu_);
  // Brings the chunks of `mappings` that are in the spill tier back (their
  // loads, and the evictions they need, deferred as any operation's waits:
  // CUDA_ERROR_NOT_READY, the promotions made kept).
  [[nodiscard]] CUresult PromoteSpilled(
      const std::vector<std::pair<uint32_t, AppMapping>>& mappings) MEMSHIM_REQUIRES(mu_);
  // Finishes every export in flight once its copies completed; called first by
  // every operation that may touch the core's chunks (Note [exports in
  // flight]). CUDA_ERROR_NOT_READY when the wait for the copies was deferred;
  // otherwise CUDA_SUCCESS (an export's own failure goes to its handle).
  [[nodiscard]] CUresult SettleExports() MEMSHIM_REQUIRES(mu_) {
    if (exports_.empty()) [[likely]]
      return CUDA_SUCCESS;
    return SettleExportsSlow();
  }
  [[nodiscard]] CUresult SettleExportsSlow() MEMSHIM_REQUIRES(mu_);
  // Where every operation that may touch the core's chunks starts (launches,
  // graph launches, copies and memsets, cuMemMap/cuMemUnmap of the
  // application's handles): ProcessDeferred(), then SettleExports() (Note
  // [exports in flight]).
  [[nodiscard]] CUresult BeginChunkOperation() MEMSHIM_REQUIRES(mu_) {
    ProcessDeferred();
    return SettleExports();
  }
  // Maps the driver memory where the handle was mapped, or, if a copy or the
  // move of the mappings failed or the handle is gone, releases it
  // (REQUIRES: its copies complete).
  void FinishExport(ExportInFlight* x) MEMSHIM_REQUIRES(mu_);
  // Note [export remap]: every mapping of x's handle maps x.real, and the
  // chunks' backings are released; or, on failure, every mapping is as it was
  // and the driver's error is returned.
  [[nodiscard]] CUresult MoveMappingsToExport(const ExportInFlight& x) MEMSHIM_REQUIRES(mu_);
  // Undoes a MoveMappingsToExport() of x that failed: unmaps the driver memory
  // from `moved` ranges ((first chunk, count) each) and maps each of
  // `unmapped` chunks' backing at its address again.
  void RestoreChunkMappings(const ExportInFlight& x,
                            const std::vector<std::pair<uint32_t, uint32_t>>& moved,
                            const std::vector<uint32_t>& unmapped) MEMSHIM_REQUIRES(mu_);
  // A device chunk of x's mappings that could not be mapped again moves to a
  // host slot with its bytes from x's driver memory (Note [export remap]);
  // false if no slot is free or the copy fails (nothing changed).
  [[nodiscard]] bool MoveToHostFromExport(const ExportInFlight& x, uint32_t chunk)
      MEMSHIM_REQUIRES(mu_);
  // AppMap() under mu_, run by RunWithWaitsOutsideLock: *backing holds the
  // chunks an attempt mapped whose backing a repeat goes on with (count 0:
  // none yet). Local to the call.
  [[nodiscard]] CUresult AppMapLocked(CUdeviceptr ptr, uint64_t bytes, uint64_t offset,
                                      CUmemGenericAllocationHandle handle, ChunkSpan* backing)
      MEMSHIM_REQUIRES(mu_);
  // Note [backed from allocation] for mapped chunks *backing: CUDA_ERROR_NOT_READY
  // when a wait was deferred (the repeat backs the rest), else clears *backing.
  [[nodiscard]] CUresult BackMappedChunks(ChunkSpan* backing) MEMSHIM_REQUIRES(mu_);
  // DropBacking() of each of chunks [first, first + count), after their work
  // (SettleChunks: deferred when the operation defers its waits).
  [[nodiscard]] CUresult DropRangeBacking(uint32_t first, uint32_t count) MEMSHIM_REQUIRES(mu_);
  // AppUnmap() and AppExport() under mu_, run by RunWithWaitsOutsideLock.
  [[nodiscard]] CUresult AppUnmapLocked(CUdeviceptr ptr, uint64_t bytes) MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] CUresult AppExportLocked(void* shareable, CUmemGenericAllocationHandle handle,
                                         CUmemAllocationHandleType type, unsigned long long flags)
      MEMSHIM_REQUIRES(mu_);
  // Finishes the page-out batch and waits until the chunks of `ranges`
  // ((first, count) each) are idle, as a synchronous driver call on them
  // must. Note [waits outside the lock]: when the operation defers its
  // waits, records them instead and returns CUDA_ERROR_NOT_READY.
  [[nodiscard]] CUresult SettleChunks(const std::pair<uint32_t, uint32_t>* ranges, size_t count)
      MEMSHIM_REQUIRES(mu_);
  // Note [application VMM]: the application's virtual handles, reserved
  // ranges and mappings.
  AppVmmBook app_vmm_ MEMSHIM_GUARDED_BY(mu_);
  // Frees what backs unowned `chunk` now (after waiting for its last uses),
  // so that its address may be given to another mapping.
  [[nodiscard]] CUresult DropBacking(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // Before a kDevice or kHost `chunk`'s backing is taken away: its work
  // done (waited for here, under mu_); CUDA_ERROR_NOT_SUPPORTED if it is
  // pinned (exported to another process).
  [[nodiscard]] CUresult SettleForRelease(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // The last step of DropBacking(): releases the device chunk or host slot
  // backing `chunk` (REQUIRES: kDevice or kHost, idle, not evicting, nothing
  // mapped at its address).
  void ReleaseBacking(uint32_t chunk) MEMSHIM_REQUIRES(mu_);
  // Chunk range [*first, *first + *count) of (ptr, bytes) if it is whole
  // chunks inside one application reservation.
  bool AppRange(CUdeviceptr ptr, uint64_t bytes, uint32_t* first, uint32_t* count) const
      MEMSHIM_REQUIRES(mu_);
  void DestroyIfUnused(CUmemGenericAllocationHandle handle) MEMSHIM_REQUIRES(mu_);
  // The chunks [m, m + n) of a mapping (its record already dropped) become
  // reserved: no block, freed like a block's (their backing is dropped by
  // the caller).
  void ReleaseMappingChunks(uint32_t m, uint32_t n) MEMSHIM_REQUIRES(mu_);
  std::unordered_map<CUmemGenericAllocationHandle, uint64_t> app_handles_ MEMSHIM_GUARDED_BY(mu_);
  // Pin counts of pinned chunks (ChunkEntry::pinned), Note [pinned blocks].
  std::unordered_map<uint32_t, uint32_t> pin_counts_ MEMSHIM_GUARDED_BY(mu_);
  // Note [buffer ids]
  //   CU_POINTER_ATTRIBUTE_BUFFER_ID is unique over the process lifetime: a
  //   later allocation at a freed block's address gets a new id. Ids are
  //   given out on the first query of a block (no cost for allocations never
  //   queried) and forgotten when the block is freed; they count from 2^63,
  //   away from the driver's own ids.
  std::unordered_map<uint64_t, unsigned long long> buffer_ids_ MEMSHIM_GUARDED_BY(mu_);
  unsigned long long next_buffer_id_ MEMSHIM_GUARDED_BY(mu_) = 1ull << 63;
  // The facts of the live block holding `ptr`; false if there is none.
  bool FactsOf(CUdeviceptr ptr, AllocationFacts* facts) MEMSHIM_REQUIRES(mu_);
  ParamLayoutCache layouts_ MEMSHIM_GUARDED_BY(mu_);
  // The chunks of the operation being prepared (Note [touch set]).
  std::unique_ptr<TouchSet> touch_ MEMSHIM_GUARDED_BY(mu_);
  // Eviction victims in the policy's order (Note [eviction]).
  std::unique_ptr<VictimPicker> picker_ MEMSHIM_GUARDED_BY(mu_);
  // Note [waits outside the lock]: the public call RunWithWaitsOutsideLock
  // runs, across its repeats (one call at a time holds mu_); reset when the
  // call ends.
  struct CallState {
    bool defer_waits = false;  // this attempt defers its waits
    bool repeating = false;    // this attempt runs the operation again
    DeferredWaits deferred;    // what this attempt deferred waiting for; empty if nothing
    // The other cores gave nothing back when this call asked them: its
    // repeats do not ask again.
    bool host_peers_dry = false;
    // The call asked the other cores to settle their completed frees
    // already (DeferPeerFrees).
    bool peer_frees_asked = false;
  };
  CallState call_ MEMSHIM_GUARDED_BY(mu_);
  // Note [demotion outside the lock]: batches started and not yet finished
  // (their threads wait for copies or store without mu_), and the number of
  // such batches finished so far, which a thread that found none to start
  // because those hold the staging buffers or the candidates waits to change
  // (call_.deferred.demotion_wait: the value it saw, set while it is to wait)
  // without mu_.
  uint32_t demotions_outside_ MEMSHIM_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> demotions_finished_{0};
  // The page-ins of the operation being prepared (fill_batch.h).
  std::unique_ptr<FillBatch> fills_ MEMSHIM_GUARDED_BY(mu_);
  // Host slots a copy may still use, released once it completed.
  std::unique_ptr<HostSlotReleases> slot_releases_ MEMSHIM_GUARDED_BY(mu_);
  // Page-outs copying on the copy stream, remapped at the next eviction
  // (Note [pipelined page-out]); created with pool_, tracker_ and policy_.
  std::unique_ptr<PageOutPipeline> page_out_ MEMSHIM_GUARDED_BY(mu_);
  // The core's side of host slots for page_out_: AcquireHost() (which may
  // wait for deferred releases or demote to the spill tier) and
  // slot_releases_. Called only from page_out_, under mu_.
  class PageOutHostSlots final : public PageOutPipeline::HostSlots {
   public:
    explicit PageOutHostSlots(ShimCore* core) : core_(core) {}
    CUresult AcquireWaiting(uint32_t* slot) override;
    void ReleaseAfter(uint32_t slot, uint64_t copy_seq) override;

   private:
    ShimCore* const core_;
  };
  PageOutHostSlots page_out_slots_{this};
  // Eviction: what to page out and when (evictor.h); created with page_out_.
  std::unique_ptr<Evictor> evictor_ MEMSHIM_GUARDED_BY(mu_);
  // The core's side for evictor_: unbacked_owned_. Called only from
  // evictor_, under mu_.
  class EvictorOwner final : public Evictor::Owner {
   public:
    explicit EvictorOwner(ShimCore* core) : core_(core) {}
    void OnOwnedDropped(uint32_t count) override;

   private:
    ShimCore* const core_;
  };
  EvictorOwner evictor_owner_{this};
  // Page-ins and residency of the operation being prepared (residency.h);
  // created with fills_.
  std::unique_ptr<Residency> residency_ MEMSHIM_GUARDED_BY(mu_);
  // The core's side for residency_: AcquireHost() and unbacked_owned_.
  // Called only from residency_, under mu_.
  class ResidencyOwner final : public Residency::Owner {
   public:
    explicit ResidencyOwner(ShimCore* core) : core_(core) {}
    CUresult AcquireHost(uint32_t* slot) override;
    void OnOwnedBacked() override;

   private:
    ShimCore* const core_;
  };
  ResidencyOwner residency_owner_{this};
  // The core's deferrable waits for evictor_ and residency_ (core_waits.h):
  // DeferWaitChunkIdle(), DeferCopyWait(), WaitChunkIdle(), WaitsDeferred().
  // Called only from them, under mu_.
  class Waits final : public CoreWaits {
   public:
    explicit Waits(ShimCore* core) : core_(core) {}
    bool DeferChunkIdle(uint32_t chunk) override;
    bool DeferCopyWait(uint64_t copy_seq) override;
    CUresult WaitChunkIdle(uint32_t chunk) override;
    bool WaitsDeferred() const override;

   private:
    ShimCore* const core_;
  };
  Waits waits_{this};
  // Blocks freed while work may still use them (Note [pending frees]).
  std::unique_ptr<PendingFrees> pending_frees_ MEMSHIM_GUARDED_BY(mu_);
  // Freed chunks still backed (Note [freed chunks]).
  std::unique_ptr<FreedChunks> freed_ MEMSHIM_GUARDED_BY(mu_);
  uint32_t unbacked_owned_ MEMSHIM_GUARDED_BY(mu_) = 0;
  uint32_t address_chunks_ MEMSHIM_GUARDED_BY(mu_) = 0;  // chunks with holds_addresses
  // Hidden targets that were in the spill tier when they became targets: the
  // next launch with hidden reach brings them back (Note [hidden reach]).
  std::vector<uint32_t> spilled_targets_ MEMSHIM_GUARDED_BY(mu_);
  // Addresses of blocks were written to device memory outside the reservation
  // (a module's __device__ variable, memory the shim passed through): any
  // kernel may read them, so every launch has hidden reach from then on.
  bool external_addresses_ MEMSHIM_GUARDED_BY(mu_) = false;
  // MEMSHIM_HIDDEN_REACH=all: every block a launch names becomes a hidden
  // target and every launch is a fence (fixed at creation).
  bool hidden_reach_all_ = false;
  // Never recorded: cuEventQuery on it asks the driver whether the calling
  // thread may make a potentially unsafe call now (CheckUnsafeCall).
  CUevent probe_event_ = nullptr;
  int captures_active_ MEMSHIM_GUARDED_BY(mu_) = 0;
  // Per executable graph (Note [graph residency] in shim_core_graph.cc): the
  // argument words of its kernel nodes that lie in the reservation and the
  // device ranges of its memcpy/memset nodes, gathered once at instantiation
  // (the driver copies node parameters then, so they cannot change until an
  // exec update, which drops the record). A launch touches exactly those.
  struct GraphPlan {
    bool decodable = true;
    const char* why = nullptr;  // the first reason it is not
    size_t nodes = 0;
    std::vector<uint64_t> words;  // sorted, distinct
    std::vector<MemRange> ranges;
    // A kernel node's arguments came in an `extra` buffer: its launches have
    // reach kUnknown (Note [hidden reach]).
    bool extra_buffer = false;
    uint64_t launches = 0;
    uint64_t page_ins = 0;  // chunks filled from the host tier before its launches
  };
  // Adds what `kernel`, a node of a walked graph, may touch to `plan`
  // (Note [graph planning outside the lock] in shim_core_graph.cc).
  void PlanKernelNode(const GraphKernelNode& kernel, GraphPlan* plan) MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] CUresult ReferencesLocked(const uint64_t* words, size_t num_words,
                                          const MemRange* ranges, size_t num_ranges,
                                          uint32_t stream, bool capturing, bool extra_buffer,
                                          Ticket* ticket) MEMSHIM_REQUIRES(mu_);
  std::unordered_map<CUgraphExec, GraphPlan> graph_plans_ MEMSHIM_GUARDED_BY(mu_);
  CoreStats stats_ MEMSHIM_GUARDED_BY(mu_);
  // Allocation hints for the control plane (see TakeUsage()).
  AllocEventLog alloc_events_ MEMSHIM_GUARDED_BY(mu_);
};

template <typename Op>
CUresult ShimCore::RunWithWaitsOutsideLock(Op op) {
  mu_.Lock();
  const CUresult r = RepeatWithWaitsOutsideLock(op);
  mu_.Unlock();
  return r;
}

template <typename Op>
CUresult ShimCore::RepeatWithWaitsOutsideLock(Op op) {
  call_.defer_waits = true;
  CUresult r = op();
  call_.defer_waits = false;
  if (!WaitsDeferred()) [[likely]]
    return r;  // nothing to wait for: the fast path
  bool defer = true;
  for (uint32_t attempt = 1; WaitsDeferred(); ++attempt) {
    if (r == CUDA_SUCCESS) {  // it found another way: nothing to wait for
      DropDeferredWaits();
      break;
    }
    if (!WaitForDeferred()) defer = false;  // the next run reports the error
    call_.defer_waits = defer && attempt < kMaxOutsideWaits;
    call_.repeating = true;
    r = op();
    call_.defer_waits = false;
    call_.repeating = false;
  }
  call_.host_peers_dry = false;
  call_.peer_frees_asked = false;
  return r;
}

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_SHIM_CORE_H_

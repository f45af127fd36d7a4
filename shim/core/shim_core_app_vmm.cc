// The application's own use of the VMM API, paged like cuMemAlloc memory.
//
// Note [application VMM]
//   Frameworks map physical memory of their own: PyTorch's expandable
//   segments reserve an address range (cuMemAddressReserve), create physical
//   memory in granules (cuMemCreate), map it at the end of the range
//   (cuMemMap, cuMemSetAccess) and later unmap and release it (cuMemUnmap,
//   cuMemRelease). The core pages that memory as it pages its own blocks:
//   * cuMemAddressReserve (with a current context) is served from the core's
//     reservation: whole chunks, aligned as asked, taken from the free
//     ranges as kReserved chunks (no capacity is used). cuMemAddressFree
//     gives them back.
//   * cuMemCreate of device memory on the core's device, in whole chunks,
//     without properties the core cannot honour (compression, a
//     non-default usage), answers a virtual handle (kVirtualHandleTag): no
//     physical memory, only the handle's size held from the virtual capacity
//     (CUDA_ERROR_OUT_OF_MEMORY beyond it, where frameworks expect the
//     driver's out-of-memory answer). Requested shareable handle types are
//     recorded; PyTorch requests one by default and uses it only to share
//     a segment with another process (export below).
//   * cuMemMap of a virtual handle into such a range makes the mapped chunks
//     one block of the core (kLarge, app_mapped): backed at mapping like an
//     allocation (Note [backed from allocation]), made resident before the
//     launches, copies and memsets that reach it, evicted to the host tier
//     and the spill tier like any block. Each chunk of a handle is mapped
//     at most once at a time (a second mapping would alias the first's
//     bytes, which chunk-by-chunk paging cannot keep: refused with
//     CUDA_ERROR_NOT_SUPPORTED).
//   * cuMemSetAccess is validated as the driver validates it; the core's
//     mappings already grant read/write to the device and its peers (Note
//     [peer access]), so nothing changes (the shim is never stricter than
//     the grant, so a kernel never faults where the driver would not).
//   * cuMemUnmap takes whole mappings only, as documented ("cannot unmap a
//     sub-range of an address range mapped by cuMemCreate / cuMemMap":
//     CUDA_ERROR_INVALID_VALUE); it waits for the work that may use them
//     (the driver's unmap is synchronous), frees their backing at once and
//     leaves the chunks reserved. Their bytes are discarded: the driver
//     keeps a handle's memory while the handle is held, so mapping an
//     unmapped part of a handle that is still held again is refused
//     (CUDA_ERROR_NOT_SUPPORTED) rather than answered with other bytes.
//   * cuMemRelease drops a reference; the handle's capacity is freed once
//     it is released and none of it is mapped, in either order.
//     cuMemRetainAllocationHandle on a mapped chunk returns its handle (one
//     more reference); cuMemGetAllocationPropertiesFromHandle answers the
//     properties it was created with.
//   * cuMemExportToShareableHandle of a virtual handle pins it: Note
//     [exported handles].
//   Everything else is the driver's and passed through (the hooks say once
//   in the log what the shim does not page): handles at a host location, of
//   a device without a core, of sizes not in whole chunks, compressible or
//   with a usage hint, imported handles. Device memory among them stays
//   resident and counts against the device budget (OnAppPhysicalCreate). A
//   driver handle mapped into a range the core gave out is mapped by the
//   driver (kForeign chunks: the core frees what it had there first and
//   never touches them); queries and copies on them go to the driver.
//   allocFlags.gpuDirectRDMACapable, which PyTorch sets where the device
//   supports RDMA on VMM memory, is accepted: no NIC can register chunks
//   that move, as none can register the shim's cuMemAlloc memory.
#include <algorithm>
#include <utility>
#include <vector>

#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {

CUresult ShimCore::AppCreate(uint64_t bytes, const CUmemAllocationProp& prop,
                             CUmemGenericAllocationHandle* handle) {
  if (handle == nullptr || bytes == 0 || bytes % kChunkBytes != 0) return CUDA_ERROR_INVALID_VALUE;
  MutexLock lock(&mu_);
  ProcessDeferred();
  const uint64_t chunks = bytes >> kChunkShift;
  if (chunks > table_.capacity() || !allocator_->Commit(static_cast<uint32_t>(chunks))) {
    MEMSHIM_LOG(kInfo, "cuMemCreate of %llu bytes exceeds the virtual capacity",
                static_cast<unsigned long long>(bytes));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = app_vmm_.AddHandle(kVirtualHandleTag | (static_cast<uint64_t>(device_ & 0xff) << 40),
                               static_cast<uint32_t>(chunks), prop);
  return CUDA_SUCCESS;
}

void ShimCore::DestroyIfUnused(CUmemGenericAllocationHandle handle) {
  const VirtualHandle* v = app_vmm_.Find(handle);
  if (v == nullptr || v->refs != 0 || v->mapped != 0) return;
  if (v->real != 0) {  // Note [exported handles]: the driver frees it once unmapped
    (void)driver_->cuMemRelease(v->real);
    app_pinned_bytes_ -= static_cast<uint64_t>(v->chunks) << kChunkShift;
    EnforceDeviceLimit();
  } else {
    allocator_->Uncommit(v->chunks);
  }
  app_vmm_.EraseHandle(handle);
}

CUresult ShimCore::AppRelease(CUmemGenericAllocationHandle handle) {
  MutexLock lock(&mu_);
  VirtualHandle* v = app_vmm_.Live(handle);
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  --v->refs;
  DestroyIfUnused(handle);
  return CUDA_SUCCESS;
}

CUresult ShimCore::AppProperties(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  MutexLock lock(&mu_);
  const VirtualHandle* v = app_vmm_.Live(handle);
  if (prop == nullptr || v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = v->prop;
  return CUDA_SUCCESS;
}

CUresult ShimCore::AppReserve(uint64_t bytes, uint64_t alignment, CUdeviceptr* ptr) {
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (alignment < kChunkBytes) alignment = kChunkBytes;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t chunks = ChunksFor(bytes);
  MutexLock lock(&mu_);
  uint32_t first = 0;
  if (chunks > table_.capacity() ||
      !allocator_->Reserve(static_cast<uint32_t>(chunks), alignment, &first)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  app_vmm_.AddReservation({first, static_cast<uint32_t>(chunks)});
  *ptr = table_.AddressOf(first);
  return CUDA_SUCCESS;
}

bool ShimCore::AppRange(CUdeviceptr ptr, uint64_t bytes, uint32_t* first, uint32_t* count) const {
  if (!table_.Contains(ptr) || bytes == 0 || (ptr - base_) % kChunkBytes != 0 ||
      bytes % kChunkBytes != 0) {
    return false;
  }
  const uint32_t f = table_.IndexOf(ptr);
  const ChunkSpan r = app_vmm_.ReservationOf(f);
  if (r.count == 0) return false;
  const uint64_t n = bytes >> kChunkShift;
  if (f + n > static_cast<uint64_t>(r.first) + r.count) return false;
  *first = f;
  *count = static_cast<uint32_t>(n);
  return true;
}

CUresult ShimCore::AppAddressFree(CUdeviceptr ptr, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (!table_.Contains(ptr)) return CUDA_ERROR_INVALID_VALUE;
  const ChunkSpan r = app_vmm_.ReservationAt(table_.IndexOf(ptr));
  if (r.count == 0 || table_.AddressOf(r.first) != ptr || ChunksFor(bytes) != r.count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (uint32_t c = r.first; c < r.first + r.count; ++c) {
    if (table_[c].kind != ChunkKind::kReserved) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  }
  allocator_->Unreserve(r.first, r.count);
  app_vmm_.EraseReservation(r.first);
  return CUDA_SUCCESS;
}

CUresult ShimCore::DropBacking(uint32_t chunk) {
  ChunkEntry& e = table_[chunk];
  if (e.evicting) evictor_->FinishPageOut();  // its page-out copy reads it
  if (e.residence == Residence::kUnbacked) return CUDA_SUCCESS;
  if (e.residence == Residence::kNvme) {
    spill_->Drop(chunk);
    return CUDA_SUCCESS;
  }
  if (const CUresult r = SettleForRelease(chunk); r != CUDA_SUCCESS) return r;
  if (!e.unmapped) {
    if (const CUresult r = pool_->UnmapAt(table_.AddressOf(chunk)); r != CUDA_SUCCESS) return r;
  }
  ReleaseBacking(chunk);
  return CUDA_SUCCESS;
}

CUresult ShimCore::SettleForRelease(uint32_t chunk) {
  if (table_[chunk].pinned) return CUDA_ERROR_NOT_SUPPORTED;  // exported to another process
  if (!uses_->Idle(chunk)) tracker_->CoverAll();
  return WaitChunkIdle(chunk);
}

void ShimCore::ReleaseBacking(uint32_t chunk) {
  ChunkEntry& e = table_[chunk];
  table_.SetUnmapped(chunk, false);
  if (e.residence == Residence::kDevice) {
    pool_->ReleaseDevice(e.phys);
  } else {
    pool_->ReleaseHost(e.phys);
  }
  e.residence = Residence::kUnbacked;
  e.fill_seq = 0;
  policy_->OnEvicted(chunk);
  ++stats_.drops;
}

CUresult ShimCore::SettleChunks(const std::pair<uint32_t, uint32_t>* ranges, size_t count) {
  if (evictor_->DeferPageOutWait()) return CUDA_ERROR_NOT_READY;
  evictor_->FinishPageOut();
  tracker_->CoverAll();
  bool deferred = false;
  for (size_t i = 0; i < count; ++i) {
    for (uint32_t c = ranges[i].first; c < ranges[i].first + ranges[i].second; ++c) {
      if (DeferWaitChunkIdle(c)) deferred = true;
    }
  }
  if (deferred) return CUDA_ERROR_NOT_READY;
  for (size_t i = 0; i < count; ++i) {
    for (uint32_t c = ranges[i].first; c < ranges[i].first + ranges[i].second; ++c) {
      if (const CUresult r = WaitChunkIdle(c); r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult ShimCore::AppMap(CUdeviceptr ptr, uint64_t bytes, uint64_t offset,
                          CUmemGenericAllocationHandle handle) {
  ChunkSpan backing;
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    return AppMapLocked(ptr, bytes, offset, handle, &backing);  // Note [waits outside the lock]
  });
}

// Waits deferred: those for the last uses of what an exported handle's range
// still holds (a dead-listed chunk), before anything changes; and those of
// backing the mapped chunks, after the mapping is made: the repeat backs the
// rest of *backing, as Alloc's does (BackNewBlock).
CUresult ShimCore::AppMapLocked(CUdeviceptr ptr, uint64_t bytes, uint64_t offset,
                                CUmemGenericAllocationHandle handle, ChunkSpan* backing) {
  if (backing->count != 0) return BackMappedChunks(backing);  // a repeat: it is mapped
  if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
  VirtualHandle* live = app_vmm_.Live(handle);
  if (live == nullptr) return CUDA_ERROR_INVALID_VALUE;
  VirtualHandle& v = *live;
  uint32_t first = 0, count = 0;
  if (offset % kChunkBytes != 0 || !AppRange(ptr, bytes, &first, &count) ||
      (offset >> kChunkShift) + count > v.chunks) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (uint32_t c = first; c < first + count; ++c) {
    if (table_[c].kind != ChunkKind::kReserved) return CUDA_ERROR_INVALID_VALUE;  // mapped
  }
  const uint32_t at = static_cast<uint32_t>(offset >> kChunkShift);
  if (v.real != 0) {  // Note [exported handles]: the driver's memory, mapped by the driver
    if (const CUresult r = DropRangeBacking(first, count); r != CUDA_SUCCESS) return r;
    const CUresult r = driver_->cuMemMap(ptr, bytes, offset, v.real, 0);
    if (r == CUDA_SUCCESS) {
      for (uint32_t c = first; c < first + count; ++c) table_[c].kind = ChunkKind::kForeign;
    }
    return r;
  }
  for (uint32_t i = at; i < at + count; ++i) {
    if (v.state[i] != 0) {
      MEMSHIM_LOG(kWarn,
                  "cuMemMap of handle %#llx: part of it is %s; the shim pages each part of a "
                  "handle at one address and does not keep the bytes of an unmapped part "
                  "(CUDA_ERROR_NOT_SUPPORTED)",
                  static_cast<unsigned long long>(handle),
                  v.state[i] == 1 ? "mapped already" : "unmapped already");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  allocator_->MapReserved(first, count);
  for (uint32_t c = first; c < first + count; ++c) table_[c].app_mapped = true;
  for (uint32_t i = at; i < at + count; ++i) v.state[i] = 1;
  v.mapped += count;
  app_vmm_.AddMapping(first, {handle, at, count});
  // Note [contiguous mappings]
  //   Adjacent mappings in one reservation are one contiguous range to the
  //   application (a tensor of an expandable segment may span two handles),
  //   so they form one block: a kernel given an address in it may reach all
  //   of it (Note [segment windows]), and copies may cross from one mapping
  //   into the next. cuMemUnmap splits the block again. Copies and memsets
  //   touch exactly their ranges.
  const ChunkSpan res = app_vmm_.ReservationOf(first);
  uint32_t lo = first, hi = first + count;
  if (lo > res.first && table_[lo - 1].app_mapped) lo = table_[lo - 1].owner_first;
  if (hi < res.first + res.count && table_[hi].app_mapped) {
    hi = table_[hi].owner_first + table_[hi].owner_count;
  }
  if (lo != first || hi != first + count) allocator_->Regroup(lo, hi - lo);
  OnChunksCommitted(first, count);
  alloc_events_.Record(static_cast<uint64_t>(first) << kChunkShift, bytes, /*freed=*/false);
  *backing = {first, count};
  return BackMappedChunks(backing);
}

CUresult ShimCore::BackMappedChunks(ChunkSpan* backing) {
  BackAtAllocation(backing->first, backing->count);
  if (WaitsDeferred()) return CUDA_ERROR_NOT_READY;  // repeated after the wait
  *backing = {};
  return CUDA_SUCCESS;
}

void ShimCore::ReleaseMappingChunks(uint32_t m, uint32_t n) {
  alloc_events_.Record(static_cast<uint64_t>(m) << kChunkShift,
                       static_cast<uint64_t>(n) << kChunkShift,
                       /*freed=*/true);
  if (!buffer_ids_.empty()) buffer_ids_.erase(static_cast<uint64_t>(m) << kChunkShift);
  // Note [contiguous mappings]: the block around the mapping splits.
  const uint32_t lo = table_[m].owner_first, hi = lo + table_[m].owner_count;
  allocator_->UnmapToReserved(m, n);
  for (uint32_t c = m; c < m + n; ++c) table_[c].app_mapped = false;
  if (lo < m) allocator_->Regroup(lo, m - lo);
  if (m + n < hi) allocator_->Regroup(m + n, hi - (m + n));
  OnChunksFreed(m, n);
}

CUresult ShimCore::AppUnmap(CUdeviceptr ptr, uint64_t bytes) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    return AppUnmapLocked(ptr, bytes);  // Note [waits outside the lock]
  });
}

CUresult ShimCore::AppUnmapLocked(CUdeviceptr ptr, uint64_t bytes) {
  if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
  uint32_t first = 0, count = 0;
  if (!AppRange(ptr, bytes, &first, &count)) return CUDA_ERROR_INVALID_VALUE;
  // Whole mappings only (Note [application VMM]).
  for (uint32_t c = first; c < first + count;) {
    const AppMapping* m = app_vmm_.MappingAt(c);
    if (m == nullptr || c + m->count > first + count) return CUDA_ERROR_INVALID_VALUE;
    c += m->count;
  }
  // The driver's unmap is synchronous: work that may use the range first.
  const std::pair<uint32_t, uint32_t> range{first, count};
  if (const CUresult r = SettleChunks(&range, 1); r != CUDA_SUCCESS) return r;
  CUresult result = CUDA_SUCCESS;
  for (uint32_t m = first; m < first + count;) {
    const AppMapping mapping = app_vmm_.TakeMapping(m);
    const uint32_t n = mapping.count;
    ReleaseMappingChunks(m, n);
    for (uint32_t c = m; c < m + n; ++c) {
      // A chunk whose backing cannot be freed now stays dead-listed: it is
      // reclaimed later, and a driver mapping there fails meanwhile.
      if (const CUresult r = DropBacking(c); r != CUDA_SUCCESS) result = r;
    }
    VirtualHandle& v = *app_vmm_.Find(mapping.handle);  // mapped: not destroyed
    for (uint32_t i = mapping.offset_chunks; i < mapping.offset_chunks + n; ++i) v.state[i] = 2;
    v.mapped -= n;
    DestroyIfUnused(mapping.handle);
    m += n;
  }
  if (result != CUDA_SUCCESS) {
    MEMSHIM_LOG(kWarn,
                "cuMemUnmap: freeing the backing of the range failed (%d); it is freed later",
                result);
  }
  return CUDA_SUCCESS;  // the range is unmapped either way
}

// Note [exported handles]
//   A virtual handle's bytes live in chunks that move, so no file descriptor
//   or fabric handle can name them. cuMemExportToShareableHandle (of a type
//   requested at creation, as the driver requires) therefore pins the
//   handle for good: the core creates driver memory of the handle's size and
//   properties (its size moves from the virtual capacity to the pinned
//   device memory that shrinks the device budget, as for memory the shim
//   does not page), copies every mapped chunk's bytes into it after the
//   work using them (from the device chunk, the host slot's mirror, or
//   promoted from the spill tier), and, once they completed (Note [exports in
//   flight]), maps it where the handle was mapped,
//   with the core's access; those chunks become the driver's (kForeign), and
//   the driver's handle is exported. Later mappings of the handle map the
//   driver's memory; its last release releases that. An unmapped part of
//   the handle had its bytes discarded (Note [application VMM]): such a
//   handle is not exported (CUDA_ERROR_NOT_SUPPORTED). PyTorch exports only
//   to share a segment with another process (torch.multiprocessing); NCCL
//   exports its buffers for peers: both keep working, without paging that
//   memory.
// Note [exports in flight]
//   The export's copies into driver memory are waited for without mu_, as
//   any wait of an operation (Note [waits outside the lock] in shim_core.h):
//   StartExport issues them and records the export in exports_; each copy is
//   a use of its chunk, so no eviction, demotion or move copies over it, and
//   the chunks keep their backing and their mappings. An export in flight is
//   a transition of its chunks that other operations must not see halfway:
//   a write to a chunk after its copy was issued would be lost when the
//   driver memory replaces it. So every operation that may touch the core's
//   chunks (launches, graph launches, copies and memsets, cuMemMap and
//   cuMemUnmap of the application's handles, another export) first settles
//   the exports in flight (SettleExports): once their copies completed, the
//   first such operation to take mu_ finishes them (FinishExport: the
//   handle's mappings move to the driver memory, kForeign); before that it
//   defers a wait for the copies, so it waits without mu_ and runs again.
//   The exporting call is one of them: its repeat finds the export finished
//   and exports the driver's handle. Operations that touch no chunk
//   (allocation, frees of other blocks, queries) go on meanwhile. A copy
//   that fails leaves every chunk where its bytes are, releases the driver
//   memory and gives its size back to the device budget; the error waits in
//   the handle (export_error) for the exporting call to report it.
CUresult ShimCore::AppExport(void* shareable, CUmemGenericAllocationHandle handle,
                             CUmemAllocationHandleType type, unsigned long long flags) {
  return RunWithWaitsOutsideLock(
      [&]() MEMSHIM_REQUIRES(mu_) { return AppExportLocked(shareable, handle, type, flags); });
}

CUresult ShimCore::AppExportLocked(void* shareable, CUmemGenericAllocationHandle handle,
                                   CUmemAllocationHandleType type, unsigned long long flags) {
  const VirtualHandle* live = app_vmm_.Live(handle);
  if (shareable == nullptr || live == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((live->prop.requestedHandleTypes & type) == 0) return CUDA_ERROR_INVALID_VALUE;
  if (driver_->cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  // Note [exports in flight]: this call's own export, or another's.
  if (const CUresult r = SettleExports(); r != CUDA_SUCCESS) return r;
  VirtualHandle& v = *app_vmm_.Find(handle);  // live: settling exports destroys no handle
  if (v.export_error != CUDA_SUCCESS) return std::exchange(v.export_error, CUDA_SUCCESS);
  if (v.real == 0) {
    if (const CUresult r = StartExport(handle, &v); r != CUDA_SUCCESS) return r;
    // In flight: finished once its copies complete, after a wait without
    // mu_ (the repeat finds it finished), or here when waits are not deferred.
    if (const CUresult r = SettleExports(); r != CUDA_SUCCESS) return r;
    if (v.export_error != CUDA_SUCCESS) return std::exchange(v.export_error, CUDA_SUCCESS);
  }
  return driver_->cuMemExportToShareableHandle(shareable, v.real, type, flags);
}

CUresult ShimCore::StartExport(CUmemGenericAllocationHandle handle, VirtualHandle* v) {
  for (uint8_t state : v->state) {
    if (state == 2) {
      MEMSHIM_LOG(kWarn,
                  "handle %#llx: part of it was unmapped and its bytes discarded; not exported",
                  static_cast<unsigned long long>(handle));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  ExportInFlight x;
  x.handle = handle;
  x.bytes = static_cast<uint64_t>(v->chunks) << kChunkShift;
  x.mappings = app_vmm_.MappingsOf(handle);
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const auto& [first, m] : x.mappings) ranges.push_back({first, m.count});
  // Work that may use its chunks completes first; then room on the device.
  if (const CUresult r = SettleChunks(ranges.data(), ranges.size()); r != CUDA_SUCCESS) return r;
  app_pinned_bytes_ += x.bytes;
  EnforceDeviceLimit();
  CUresult r = WaitsDeferred() ? CUDA_ERROR_NOT_READY : PromoteSpilled(x.mappings);
  if (r != CUDA_SUCCESS) {  // repeated after a deferred wait, from the start
    app_pinned_bytes_ -= x.bytes;
    EnforceDeviceLimit();
    return r;
  }
  // No wait from here on: PromoteSpilled left no chunk in the spill tier, and
  // nothing is evicted.
  r = driver_->cuMemCreate(&x.real, x.bytes, &v->prop, 0);
  if (r == CUDA_SUCCESS) r = driver_->cuMemAddressReserve(&x.staging, x.bytes, 0, 0, 0);
  if (r == CUDA_SUCCESS && (r = pool_->MapRange(x.staging, x.bytes, 0, x.real)) != CUDA_SUCCESS) {
    (void)driver_->cuMemAddressFree(x.staging, x.bytes);
    x.staging = 0;
  }
  // The bytes, chunk by chunk, from the device chunk or the host slot's
  // mirror; each copy is a use of its chunk (no eviction, demotion or move
  // copies over it).
  std::vector<uint32_t> copied;
  for (const auto& [first, m] : x.mappings) {
    for (uint32_t i = 0; i < m.count && r == CUDA_SUCCESS; ++i) {
      const uint32_t c = first + i;
      const ChunkEntry& e = table_[c];
      if (e.residence == Residence::kUnbacked) continue;  // no bytes
      if (e.residence == Residence::kNvme) {  // not after PromoteSpilled: fail, lose nothing
        r = CUDA_ERROR_ILLEGAL_STATE;
        break;
      }
      const CUdeviceptr src =
          e.residence == Residence::kHost ? pool_->mirror(e.phys) : table_.AddressOf(c);
      r = driver_->cuMemcpyDtoDAsync_v2(
          x.staging + (static_cast<uint64_t>(m.offset_chunks + i) << kChunkShift), src, kChunkBytes,
          copy_stream_);
      if (r == CUDA_SUCCESS) copied.push_back(c);
    }
  }
  x.copy_seq = tracker_->Issue(copy_index_);
  for (uint32_t c : copied) uses_->Add(c, copy_index_, x.copy_seq);
  x.issue_result = r;
  exports_.push_back(std::move(x));
  return CUDA_SUCCESS;
}

CUresult ShimCore::PromoteSpilled(const std::vector<std::pair<uint32_t, AppMapping>>& mappings) {
  if (SpilledChunks() == 0) return CUDA_SUCCESS;
  touch_->Begin();
  for (const auto& [first, m] : mappings) {  // none is a victim for the others
    for (uint32_t c = first; c < first + m.count; ++c) touch_->Chunk(c);
  }
  fills_->Clear();
  CUresult r = CUDA_SUCCESS;
  for (const auto& [first, m] : mappings) {
    for (uint32_t c = first; c < first + m.count && r == CUDA_SUCCESS; ++c) {
      if (table_[c].residence == Residence::kNvme) r = residency_->PageIn(c, /*may_evict=*/true);
    }
  }
  fills_->Commit(fills_->Mark());  // promotions made stay made; the export's copies follow them
  touch_->Clear();
  return r;
}

CUresult ShimCore::SettleExportsSlow() {
  uint64_t last = 0;
  for (const ExportInFlight& x : exports_) last = std::max(last, x.copy_seq);
  if (!tracker_->IsComplete(copy_index_, last)) {
    if (DeferCopyWait(last)) return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock]
    ++stats_.host_waits;
    (void)tracker_->WaitFor(copy_index_, last);  // each export's own result below
  }
  // Anything the core itself started on the chunks since (a page-out of one
  // whose copy completed) completes before their backing is dropped.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  for (const ExportInFlight& x : exports_) {
    for (const auto& [first, m] : x.mappings) ranges.push_back({first, m.count});
  }
  if (const CUresult r = SettleChunks(ranges.data(), ranges.size()); r == CUDA_ERROR_NOT_READY) {
    return r;
  }
  std::vector<ExportInFlight> done = std::move(exports_);
  exports_.clear();
  for (ExportInFlight& x : done) FinishExport(&x);
  return CUDA_SUCCESS;
}

void ShimCore::FinishExport(ExportInFlight* x) {
  CUresult r = x->issue_result;
  if (const CUresult w = tracker_->WaitFor(copy_index_, x->copy_seq); r == CUDA_SUCCESS) r = w;
  VirtualHandle* v = app_vmm_.Find(x->handle);
  // While the staging range still maps the driver memory (Note [export remap]).
  if (r == CUDA_SUCCESS && v != nullptr) r = MoveMappingsToExport(*x);
  if (x->staging != 0) {
    (void)driver_->cuMemUnmap(x->staging, x->bytes);
    (void)driver_->cuMemAddressFree(x->staging, x->bytes);
  }
  if (r != CUDA_SUCCESS || v == nullptr) {  // nothing changed for the application
    if (x->real != 0) (void)driver_->cuMemRelease(x->real);
    app_pinned_bytes_ -= x->bytes;
    EnforceDeviceLimit();
    if (v == nullptr) return;  // released meanwhile, with nothing mapped
    v->export_error = r;
    MEMSHIM_LOG(kError, "handle %#llx could not be moved to driver memory for export (%d)",
                static_cast<unsigned long long>(x->handle), r);
    return;
  }
  v->mapped = 0;
  v->real = x->real;
  allocator_->Uncommit(v->chunks);
  MEMSHIM_LOG(kInfo, "handle %#llx exported: %llu bytes pinned in driver memory",
              static_cast<unsigned long long>(x->handle),
              static_cast<unsigned long long>(x->bytes));
}

// Note [export remap]
//   The handle's mappings move to the driver memory all together or not at
//   all. Its pieces mapped at different addresses are one handle to the
//   application: moving some while the others stay on the core's chunks
//   would leave the handle's bytes in two places, and a failed export would
//   leave addresses mapping driver memory that is released. cuMemMap needs
//   an unmapped range, so each mapping's chunks are unmapped first, their
//   backing kept, and the driver memory mapped over the range. When a step
//   fails, the ranges already moved are unmapped, every chunk is mapped at
//   its address again (a host chunk whose remap fails is marked unmapped and
//   mapped at its next access, Note [failed transitions] in shim_core.h), and
//   the export fails with the driver's error: the application's mappings and
//   bytes are as they were. Only once every mapping moved are the chunks'
//   backings released. A device chunk whose own remap fails too moves to a
//   host slot, its bytes copied from the driver memory (still mapped at the
//   export's staging range, and equal to the chunk's: the copies completed
//   and no operation ran since), and is mapped there at its next access as
//   a host chunk whose remap failed is; with no host slot to be had without
//   a wait it stays unmapped (logged).
CUresult ShimCore::MoveMappingsToExport(const ExportInFlight& x) {
  std::vector<uint32_t> unmapped;                    // chunks whose mapping this took down
  std::vector<std::pair<uint32_t, uint32_t>> moved;  // ranges now mapping x.real
  CUresult r = CUDA_SUCCESS;
  for (const auto& [m, mapping] : x.mappings) {
    for (uint32_t c = m; c < m + mapping.count && r == CUDA_SUCCESS; ++c) {
      const ChunkEntry& e = table_[c];
      if (e.evicting) evictor_->FinishPageOut();  // its page-out copy reads it
      if (e.residence == Residence::kUnbacked || e.residence == Residence::kNvme) continue;
      if ((r = SettleForRelease(c)) != CUDA_SUCCESS) break;
      if (!e.unmapped && (r = pool_->UnmapAt(table_.AddressOf(c))) == CUDA_SUCCESS) {
        unmapped.push_back(c);
      }
    }
    if (r == CUDA_SUCCESS) {
      r = pool_->MapRange(table_.AddressOf(m), static_cast<uint64_t>(mapping.count) << kChunkShift,
                          static_cast<uint64_t>(mapping.offset_chunks) << kChunkShift, x.real);
    }
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "mapping exported handle %#llx at %p failed (%d); its mappings stay",
                  static_cast<unsigned long long>(x.handle),
                  reinterpret_cast<void*>(table_.AddressOf(m)), r);
      RestoreChunkMappings(x, moved, unmapped);
      return r;
    }
    moved.push_back({m, mapping.count});
  }
  for (const auto& [m, mapping] : x.mappings) {
    (void)app_vmm_.TakeMapping(m);
    // Frees the chunks: a chunk demoted after its copy completed leaves the
    // spill tier there (the driver memory has its bytes).
    ReleaseMappingChunks(m, mapping.count);
    for (uint32_t c = m; c < m + mapping.count; ++c) {
      if (table_[c].residence != Residence::kUnbacked) ReleaseBacking(c);
      table_[c].kind = ChunkKind::kForeign;
    }
  }
  return CUDA_SUCCESS;
}

void ShimCore::RestoreChunkMappings(const ExportInFlight& x,
                                    const std::vector<std::pair<uint32_t, uint32_t>>& moved,
                                    const std::vector<uint32_t>& unmapped) {
  for (const auto& [first, count] : moved) {
    if (const CUresult r = driver_->cuMemUnmap(table_.AddressOf(first), static_cast<uint64_t>(count)
                                                                            << kChunkShift);
        r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "unmapping driver memory at %p failed (%d)",
                  reinterpret_cast<void*>(table_.AddressOf(first)), r);
    }
  }
  for (uint32_t c : unmapped) {
    const ChunkEntry& e = table_[c];
    const CUdeviceptr va = table_.AddressOf(c);
    if (e.residence == Residence::kHost) {
      (void)fills_->MapHostSlot(c);  // a failure marks it unmapped: mapped at its next use
    } else if (const CUresult r = pool_->MapAt(va, pool_->device_handle(e.phys));
               r != CUDA_SUCCESS && !MoveToHostFromExport(x, c)) {
      MEMSHIM_LOG(kError, "remapping a device chunk at %p failed (%d); it stays unmapped",
                  reinterpret_cast<void*>(va), r);
    }
  }
}

bool ShimCore::MoveToHostFromExport(const ExportInFlight& x, uint32_t chunk) {
  if (x.staging == 0) return false;
  uint64_t offset = 0;  // of the chunk in the handle
  for (const auto& [m, mapping] : x.mappings) {
    if (chunk >= m && chunk < m + mapping.count) offset = mapping.offset_chunks + (chunk - m);
  }
  uint32_t slot;
  if (pool_->AcquireHost(&slot) != CUDA_SUCCESS) return false;
  CUresult r = driver_->cuMemcpyDtoDAsync_v2(
      pool_->mirror(slot), x.staging + (offset << kChunkShift), kChunkBytes, copy_stream_);
  if (r == CUDA_SUCCESS) r = tracker_->WaitFor(copy_index_, tracker_->Issue(copy_index_));
  if (r != CUDA_SUCCESS) {
    pool_->ReleaseHost(slot);
    return false;
  }
  ChunkEntry& e = table_[chunk];
  pool_->ReleaseDevice(e.phys);
  e.residence = Residence::kHost;
  e.phys = slot;
  e.fill_seq = 0;
  (void)fills_->MapHostSlot(chunk);  // a failure marks it unmapped: mapped at its next use
  policy_->OnEvicted(chunk);
  ++stats_.evictions;
  MEMSHIM_LOG(kWarn, "device chunk at %p moved to host memory after its remap failed",
              reinterpret_cast<void*>(table_.AddressOf(chunk)));
  return true;
}

CUresult ShimCore::BeginForeignMap(CUdeviceptr ptr, uint64_t bytes) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    uint32_t first = 0, count = 0;
    if (!AppRange(ptr, bytes, &first, &count)) return CUDA_ERROR_INVALID_VALUE;
    for (uint32_t c = first; c < first + count; ++c) {
      if (table_[c].kind != ChunkKind::kReserved) return CUDA_ERROR_INVALID_VALUE;
    }
    if (const CUresult r = DropRangeBacking(first, count); r != CUDA_SUCCESS) return r;
    for (uint32_t c = first; c < first + count; ++c) table_[c].kind = ChunkKind::kForeign;
    return CUDA_SUCCESS;
  });
}

CUresult ShimCore::DropRangeBacking(uint32_t first, uint32_t count) {
  bool backed = false;
  for (uint32_t c = first; c < first + count; ++c) {
    if (table_[c].residence != Residence::kUnbacked) backed = true;
  }
  if (!backed) return CUDA_SUCCESS;  // the common case: nothing left there
  const std::pair<uint32_t, uint32_t> range{first, count};
  if (const CUresult r = SettleChunks(&range, 1); r != CUDA_SUCCESS) return r;
  for (uint32_t c = first; c < first + count; ++c) {
    if (const CUresult r = DropBacking(c); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void ShimCore::EndForeignMap(CUdeviceptr ptr, uint64_t bytes, bool mapped) {
  if (mapped) return;
  OnForeignUnmap(ptr, bytes);
}

bool ShimCore::IsForeign(CUdeviceptr ptr, uint64_t bytes) {
  MutexLock lock(&mu_);
  if (!table_.Contains(ptr)) return false;
  const uint32_t first = table_.IndexOf(ptr);
  const uint64_t end =
      std::min<uint64_t>(ptr - base_ + std::max<uint64_t>(bytes, 1), table_.bytes());
  for (uint32_t c = first; c <= static_cast<uint32_t>((end - 1) >> kChunkShift); ++c) {
    if (table_[c].kind != ChunkKind::kForeign) return false;
  }
  return true;
}

void ShimCore::OnForeignUnmap(CUdeviceptr ptr, uint64_t bytes) {
  MutexLock lock(&mu_);
  uint32_t first = 0, count = 0;
  if (!AppRange(ptr, bytes, &first, &count)) return;
  for (uint32_t c = first; c < first + count; ++c) {
    if (table_[c].kind == ChunkKind::kForeign) table_[c].kind = ChunkKind::kReserved;
  }
}

CUresult ShimCore::AppSetAccess(CUdeviceptr ptr, uint64_t bytes, const CUmemAccessDesc* desc,
                                size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const CUmemLocationType t = desc[i].location.type;
    if (t == CU_MEM_LOCATION_TYPE_DEVICE) {
      int devices = 0;
      if (driver_->cuDeviceGetCount != nullptr &&
          driver_->cuDeviceGetCount(&devices) == CUDA_SUCCESS &&
          (desc[i].location.id < 0 || desc[i].location.id >= devices)) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
    } else if (t != CU_MEM_LOCATION_TYPE_HOST && t != CU_MEM_LOCATION_TYPE_HOST_NUMA &&
               t != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  MutexLock lock(&mu_);
  uint32_t first = 0, n = 0;
  if (!AppRange(ptr, bytes, &first, &n)) return CUDA_ERROR_INVALID_VALUE;
  for (uint32_t c = first; c < first + n; ++c) {
    if (!table_[c].app_mapped) return CUDA_ERROR_INVALID_VALUE;  // the range must be mapped
  }
  return CUDA_SUCCESS;
}

CUresult ShimCore::AppRetain(CUmemGenericAllocationHandle* handle, CUdeviceptr ptr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  MutexLock lock(&mu_);
  if (!table_.Contains(ptr)) return CUDA_ERROR_INVALID_VALUE;
  const uint32_t c = table_.IndexOf(ptr);
  if (!table_[c].app_mapped) return CUDA_ERROR_INVALID_VALUE;
  uint32_t first = 0;
  const AppMapping* m = app_vmm_.MappingOf(c, &first);
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ++app_vmm_.Find(m->handle)->refs;  // mapped: not destroyed
  *handle = m->handle;
  return CUDA_SUCCESS;
}

bool ShimCore::IsAppMapped(CUdeviceptr ptr) {
  MutexLock lock(&mu_);
  return table_.Contains(ptr) && table_[table_.IndexOf(ptr)].app_mapped;
}

}  // namespace memvirt::shim

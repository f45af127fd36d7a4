#include "shim/core/shim_core.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "shim/core/log.h"

namespace memvirt::shim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kDefaultVaCap = 4096 * kGiB;  // Note [reservation size]
constexpr uint64_t kLeastVaCap = 512 * kGiB;
constexpr uint32_t kDemotionBatch = 16;  // host chunks stored per spill-tier wait

uint64_t RoundUpChunks(uint64_t bytes) { return ChunksFor(bytes) << kChunkShift; }

uint64_t PhysicalRamBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 8 * kGiB;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// nvidia-smi's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; empty if unknown.
std::string DeviceUuid(const Driver* driver, CUdevice device) {
  CUuuid uuid;
  if (driver->cuDeviceGetUuid_v2 == nullptr ||
      driver->cuDeviceGetUuid_v2(&uuid, device) != CUDA_SUCCESS) {
    return "";
  }
  std::string out = "GPU-";
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    const auto byte = static_cast<unsigned char>(uuid.bytes[i]);
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

// Devices that can access `device`'s memory (Note [peer access] in shim_core.h).
std::vector<CUdevice> PeersOf(const Driver* driver, CUdevice device) {
  std::vector<CUdevice> peers;
  int count = 0;
  if (driver->cuDeviceGetCount == nullptr || driver->cuDeviceCanAccessPeer == nullptr ||
      driver->cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return peers;
  }
  for (CUdevice peer = 0; peer < count; ++peer) {
    int can = 0;
    if (peer != device && driver->cuDeviceCanAccessPeer(&can, peer, device) == CUDA_SUCCESS &&
        can != 0) {
      peers.push_back(peer);
    }
  }
  return peers;
}

}  // namespace

ShimCore::ShimCore(const Driver* driver, ControlPlane* control)
    : driver_(driver), control_(control), layouts_(driver) {}

CUresult ShimCore::Create(const Driver* driver, const CoreOptions& options, ControlPlane* control,
                          std::unique_ptr<ShimCore>* out) {
  std::unique_ptr<ShimCore> core(new ShimCore(driver, control));
  CUresult r = driver->cuCtxGetCurrent(&core->context_);
  if (r != CUDA_SUCCESS) return r;
  if (core->context_ == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if ((r = driver->cuCtxGetDevice(&core->device_)) != CUDA_SUCCESS) return r;

  size_t free_bytes = 0, total_bytes = 0;
  if ((r = driver->cuMemGetInfo_v2(&free_bytes, &total_bytes)) != CUDA_SUCCESS) return r;
  const uint64_t local_device =
      options.device_budget != 0 ? options.device_budget : free_bytes / 10 * 9;
  const uint64_t local_host =
      options.host_budget != 0 ? options.host_budget : PhysicalRamBytes() / 2;
  DeviceIdentity identity;
  identity.uuid = DeviceUuid(driver, core->device_);
  identity.total_bytes = total_bytes;
  const uint64_t device_budget = control->InitialDeviceBudget(identity, local_device);
  const uint64_t host_budget = control->InitialHostBudget(local_host);
  SpillTier* const spill = control->spill_tier();
  const uint64_t spill_bytes = spill != nullptr ? spill->capacity_bytes() : 0;
  const uint32_t device_chunks = static_cast<uint32_t>(device_budget >> kChunkShift);
  const uint32_t host_chunks = static_cast<uint32_t>(host_budget >> kChunkShift);

  // Note [reservation size]: the reservation holds the allocations and the application's own
  // reservations (cuMemAddressReserve is served from it). PyTorch's expandable segments reserve
  // 1.125 x the device's total memory per pool (a large and a small pool per stream that
  // allocates, one more per CUDA graph's private pool): measured on an H200, a reservation sized
  // from the budgets alone (44 GiB) could not hold one, and the program failed with
  // CUDA_ERROR_NOT_SUPPORTED. So the default asks for 16 x the device's memory (capped at
  // 4 TiB): address space costs no memory, and the chunk table only the entries of the range in
  // use (Note [sparse chunk table] in chunk_table.h). A driver that cannot reserve that much gets
  // halving requests down to the least the budgets need (1.25 x their sum, at least 3 x the
  // device's memory, 1 GiB .. 512 GiB). MEMSHIM_VA_SIZE asks for one size, with no fallback.
  uint64_t va = RoundUpChunks(options.va_bytes);
  uint64_t least = va;
  if (va == 0) {
    least =
        std::max<uint64_t>(std::min(device_budget + host_budget + spill_bytes, kLeastVaCap) / 4 * 5,
                           std::min<uint64_t>(total_bytes, kLeastVaCap) * 3);
    least = RoundUpChunks(std::clamp<uint64_t>(least, kGiB, kLeastVaCap));
    va = std::max(least, RoundUpChunks(std::min<uint64_t>(total_bytes, kDefaultVaCap / 16) * 16));
  }
  while ((r = driver->cuMemAddressReserve(&core->base_, va, kChunkBytes, 0, 0)) != CUDA_SUCCESS &&
         va > least) {
    va = std::max(least, RoundUpChunks(va / 2));
  }
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "cannot reserve %llu bytes of device address space (%d)",
                static_cast<unsigned long long>(va), r);
    return r;
  }
  core->va_bytes_ = va;
  if ((r = driver->cuStreamCreate(&core->copy_stream_, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
    driver->cuMemAddressFree(core->base_, va);
    core->va_bytes_ = 0;
    return r;
  }
  if (driver->cuEventCreate(&core->probe_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    core->probe_event_ = nullptr;  // CheckUnsafeCall then lets the driver-less path decide
  }
  int numa = 0;
  if (driver->cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, core->device_) !=
          CUDA_SUCCESS ||
      numa < 0) {
    numa = 0;
  }

  bool has_spill = false;
  {
    MutexLock lock(&core->mu_);
    const uint32_t num_chunks = static_cast<uint32_t>(va >> kChunkShift);
    core->table_ = ChunkTable(core->base_, num_chunks);
    if (core->table_.capacity() != num_chunks) {
      MEMSHIM_LOG(kError, "cannot map the chunk table for %llu bytes of address space",
                  static_cast<unsigned long long>(va));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    core->pool_ = std::make_unique<PhysicalPool>(driver, core->device_, numa);
    if (options.host_ledger != nullptr) core->pool_->ShareHostLedger(options.host_ledger);
    core->host_peers_ = options.host_peers;
    core->pool_->SetPeers(PeersOf(driver, core->device_));
    // A failure leaves the host tier off (logged): the capacity below is then
    // the device budget (Note [host tier preconditions] in physical_pool.h).
    (void)core->pool_->Init(device_chunks, host_chunks);
    core->device_budget_chunks_ = device_chunks;
    // The spill tier holds demoted host chunks: without a host tier it is unused.
    SpillTier* const usable_spill =
        core->pool_->host_tier_available() && SpillManager::Usable(driver, spill) ? spill : nullptr;
    has_spill = usable_spill != nullptr;
    const uint64_t spill_chunks = has_spill ? spill_bytes >> kChunkShift : 0;
    const uint32_t capacity = static_cast<uint32_t>(std::min<uint64_t>(
        num_chunks,
        static_cast<uint64_t>(device_chunks) + core->pool_->host_limit() + spill_chunks));
    core->allocator_ = std::make_unique<BlockAllocator>(&core->table_, capacity);
    // Note [shared admission]: beyond its device budget, the core admits
    // what the process's host budget and spill capacity still hold.
    OverflowLedger* overflow = options.overflow_ledger;
    if (overflow == nullptr) {
      core->own_overflow_ = std::make_unique<OverflowLedger>(core->pool_->host_ledger());
      overflow = core->own_overflow_.get();
    }
    if (has_spill) {
      overflow->InitSpillChunks(spill_chunks);
      core->spill_reserve_ = usable_spill->staging_slots();
      overflow->AddSpillReserve(core->spill_reserve_);
    }
    core->overflow_ = overflow;
    core->allocator_->ShareOverflow(overflow, device_chunks);
    core->tracker_ =
        std::make_unique<StreamTracker>(driver, options.event_batch, options.event_pace);
    core->copy_index_ = core->tracker_->Adopt(core->copy_stream_);
    core->uses_ =
        std::make_unique<ChunkUses>(&core->table_, core->tracker_.get(), core->copy_index_);
    core->policy_ = MakeResidencyPolicy(options.policy, num_chunks);
    core->hidden_reach_all_ = options.hidden_reach_all;
    core->policy_->OnBudgetChange(device_budget);
    const TransitionParts parts{
        .driver = driver,
        .table = &core->table_,
        .pool = core->pool_.get(),
        .tracker = core->tracker_.get(),
        .copy_index = core->copy_index_,
        .copy_stream = core->copy_stream_,
        .policy = core->policy_.get(),
        .stats = &core->stats_,
    };
    core->page_out_ = std::make_unique<PageOutPipeline>(
        PageOutPipeline::Parts{parts, /*host_slots=*/&core->page_out_slots_});
    core->touch_ = std::make_unique<TouchSet>(&core->table_, core->page_out_.get());
    core->freed_ = std::make_unique<FreedChunks>(parts, core->uses_.get());
    core->pending_frees_ =
        std::make_unique<PendingFrees>(&core->table_, core->uses_.get(), core->tracker_.get());
    core->picker_ = std::make_unique<VictimPicker>(&core->table_, core->uses_.get(),
                                                   core->policy_.get(), core->touch_.get());
    core->evictor_ = std::make_unique<Evictor>(Evictor::Parts{
        .page_out = core->page_out_.get(),
        .picker = core->picker_.get(),
        .tracker = core->tracker_.get(),
        .copy_index = core->copy_index_,
        .uses = core->uses_.get(),
        .pool = core->pool_.get(),
        .freed = core->freed_.get(),
        .waits = &core->waits_,
        .owner = &core->evictor_owner_,
        .lookahead_min_chunks = options.lookahead_min_chunks,
    });
    if (has_spill) {
      core->spill_ = std::make_unique<SpillManager>(
          SpillManager::Parts{parts, /*tier=*/usable_spill, /*owner=*/&core->spill_owner_});
      core->spill_tier_ = usable_spill;
    }
    core->slot_releases_ = std::make_unique<HostSlotReleases>(
        core->pool_.get(), core->tracker_.get(), core->copy_index_);
    core->fills_ =
        std::make_unique<FillBatch>(parts, core->slot_releases_.get(), core->spill_.get());
    core->residency_ = std::make_unique<Residency>(Residency::Parts{
        .transition = parts,
        .uses = core->uses_.get(),
        .touch = core->touch_.get(),
        .evictor = core->evictor_.get(),
        .fills = core->fills_.get(),
        .spill = core->spill_.get(),
        .waits = &core->waits_,
        .owner = &core->residency_owner_,
    });
    MEMSHIM_LOG(kInfo,
                "virtual device memory: %llu MiB device budget, %llu MiB host tier, %llu MiB "
                "spill tier, %llu MiB address space, policy %s",
                static_cast<unsigned long long>(device_budget >> 20),
                static_cast<unsigned long long>(
                    static_cast<uint64_t>(core->pool_->host_limit()) << kChunkShift >> 20),
                static_cast<unsigned long long>(spill_chunks << kChunkShift >> 20),
                static_cast<unsigned long long>(va >> 20), core->policy_->name());
  }
  // Lock order (shim_core.h): the control plane may deliver a directive from
  // its own thread, holding its own locks, as soon as a callback is set.
  ShimCore* raw = core.get();
  control->OnBudgetChange([raw](uint64_t bytes) { raw->SetDeviceBudget(bytes); });
  control->SetUsageSource([raw] { return raw->TakeUsage(); });
  if (has_spill) {
    control->OnHostTierControl({[raw](uint64_t bytes) { raw->SetHostBudget(bytes); },
                                [raw](uint64_t bytes) { return raw->DemoteHostBytes(bytes); }});
  }
  *out = std::move(core);
  return CUDA_SUCCESS;
}

ShimCore::~ShimCore() {
  if (control_ != nullptr) {  // no callback into this core runs after these return
    control_->OnBudgetChange({});
    control_->SetUsageSource({});
    control_->OnHostTierControl({});
  }
  {
    MutexLock lock(&mu_);
    if (tracker_ != nullptr) (void)tracker_->WaitForAll();  // teardown: best effort
    for (const ExportInFlight& x : exports_) {  // never finished: the driver memory goes
      if (x.staging != 0) {
        (void)driver_->cuMemUnmap(x.staging, x.bytes);
        (void)driver_->cuMemAddressFree(x.staging, x.bytes);
      }
      if (x.real != 0) (void)driver_->cuMemRelease(x.real);
    }
    for (uint32_t c = 0; c < table_.size(); ++c) {
      const Residence r = table_[c].residence;
      if ((r == Residence::kDevice || r == Residence::kHost) && !table_[c].unmapped) {
        (void)pool_->UnmapAt(table_.AddressOf(c));  // teardown: nothing to keep
      }
    }
    fills_.reset();    // before what it points to
    spill_.reset();    // unpins the staging buffers; before what it points to
    evictor_.reset();  // before what it points to
    picker_.reset();   // before what it points to
    freed_.reset();    // before what it points to
    pending_frees_.reset();
    touch_.reset();     // before what it points to
    page_out_.reset();  // before what it points to
    slot_releases_.reset();
    uses_.reset();
    tracker_.reset();
    allocator_.reset();  // gives its overflow charge back
    if (overflow_ != nullptr) overflow_->AddSpillReserve(-static_cast<int64_t>(spill_reserve_));
    pool_.reset();
  }
  if (copy_stream_ != nullptr) driver_->cuStreamDestroy_v2(copy_stream_);
  if (probe_event_ != nullptr) driver_->cuEventDestroy_v2(probe_event_);
  if (va_bytes_ != 0) driver_->cuMemAddressFree(base_, va_bytes_);
}

// ---- Memory management -------------------------------------------------------

void ShimCore::OnChunksCommitted(uint32_t first, uint32_t count) {
  for (uint32_t c = first; c < first + count; ++c) {
    ChunkEntry& e = table_[c];
    e.live_data = true;
    if (e.residence == Residence::kUnbacked) ++unbacked_owned_;
    policy_->OnAlloc(c);
    if (e.residence == Residence::kDevice) policy_->OnResident(c);  // warm chunk
  }
}

void ShimCore::OnChunksFreed(uint32_t first, uint32_t count) {
  for (uint32_t c = first; c < first + count; ++c) {
    ChunkEntry& e = table_[c];
    e.live_data = false;
    if (e.holds_addresses) {
      e.holds_addresses = false;
      --address_chunks_;
    }
    e.hidden_target = false;
    if (e.residence == Residence::kUnbacked) {
      --unbacked_owned_;
    } else if (e.residence == Residence::kNvme) {
      spill_->Drop(c);
    } else {
      freed_->Add(c);  // Note [freed chunks]
    }
    policy_->OnFree(c);
  }
}

CUresult ShimCore::Alloc(CUdeviceptr* ptr, uint64_t bytes) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  AllocBacking backing;
  return RunWithWaitsOutsideLock(
      [&]() MEMSHIM_REQUIRES(mu_) { return AllocLocked(ptr, bytes, &backing); });
}

// Inlined into Alloc, as LaunchLocked into BeforeLaunch: a call costs some 30
// instructions an allocation. The waits for pending frees and for backing
// the new chunks are deferred (Note [waits outside the lock]); a repeat after
// the latter backs the rest of the block the first attempt allocated.
[[gnu::always_inline]] inline CUresult ShimCore::AllocLocked(CUdeviceptr* ptr, uint64_t bytes,
                                                             AllocBacking* backing) {
  const bool may_defer = std::exchange(call_.defer_waits, false);
  if (backing->count != 0) [[unlikely]] {  // a repeat: the block is allocated
    return BackNewBlock(ptr, bytes, may_defer, backing);
  }
  ProcessDeferred();
  BlockAllocator::Allocation a;
  bool ok = allocator_->Allocate(bytes, &a);
  if (!ok && !pending_frees_->empty()) {
    // Note [pending frees]: repeated after the wait.
    if (may_defer && pending_frees_->CollectWaits(&call_.deferred.uses))
      return CUDA_ERROR_OUT_OF_MEMORY;
    stats_.host_waits += pending_frees_->WaitAll();
    ProcessDeferred();
    ok = allocator_->Allocate(bytes, &a);
  }
  if (!ok && may_defer && DeferPeerFrees()) return CUDA_ERROR_OUT_OF_MEMORY;  // repeated after
  if (!ok) {
    MEMSHIM_LOG(kInfo, "allocation of %llu bytes exceeds the virtual capacity",
                static_cast<unsigned long long>(bytes));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (a.new_count != 0) {
    OnChunksCommitted(a.new_first, a.new_count);
    *backing = {a.offset, a.new_first, a.new_count};
    return BackNewBlock(ptr, bytes, may_defer, backing);
  }
  alloc_events_.Record(a.offset, bytes, /*freed=*/false);
  *ptr = base_ + a.offset;
  return CUDA_SUCCESS;
}

CUresult ShimCore::BackNewBlock(CUdeviceptr* ptr, uint64_t bytes, bool may_defer,
                                AllocBacking* backing) {
  call_.defer_waits = may_defer;
  BackAtAllocation(backing->first, backing->count);
  call_.defer_waits = false;
  if (WaitsDeferred()) return CUDA_ERROR_NOT_READY;  // repeated after the wait
  backing->count = 0;
  alloc_events_.Record(backing->offset, bytes, /*freed=*/false);
  *ptr = base_ + backing->offset;
  return CUDA_SUCCESS;
}

CUresult ShimCore::AllocPitch(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height,
                              unsigned element_bytes) {
  if (pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_bytes != 4 && element_bytes != 8 && element_bytes != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  constexpr size_t kPitchAlign = 512;
  const size_t row = (width + kPitchAlign - 1) / kPitchAlign * kPitchAlign;
  CUresult r = Alloc(ptr, static_cast<uint64_t>(row) * height);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

CUresult ShimCore::FreeLocked(uint64_t offset) {
  BlockAllocator::Release rel;
  if (!allocator_->Free(offset, &rel)) return CUDA_ERROR_INVALID_VALUE;
  if (!buffer_ids_.empty()) buffer_ids_.erase(offset);  // Note [buffer ids]
  if (rel.freed_count != 0) {
    OnChunksFreed(rel.freed_first, rel.freed_count);
    (void)freed_->ReleaseHostSlots(rel.freed_first, rel.freed_count);
  }
  return CUDA_SUCCESS;
}

CUresult ShimCore::Free(CUdeviceptr ptr) {
  MutexLock lock(&mu_);
  ProcessDeferred();
  const uint64_t offset = ptr - base_;
  uint64_t block = 0, bytes = 0;
  if (!allocator_->Lookup(offset, &block, &bytes) || block != offset ||
      table_[static_cast<uint32_t>(offset >> kChunkShift)].app_mapped) {  // VMM: not freeable
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (pending_frees_->Contains(offset)) return CUDA_ERROR_INVALID_VALUE;  // double free
  alloc_events_.Record(offset, bytes, /*freed=*/true);
  // Note [pending frees]: a large block still in use is freed once that work
  // is done; a small one at once.
  const bool large = table_[static_cast<uint32_t>(offset >> kChunkShift)].kind == ChunkKind::kLarge;
  if (large && !pending_frees_->BlockIdle(offset)) {
    tracker_->CoverAll();  // finished work shows
    if (!pending_frees_->BlockIdle(offset)) {
      pending_frees_->AddUntilIdle(offset);
      return CUDA_SUCCESS;
    }
  }
  return FreeLocked(offset);
}

CUresult ShimCore::FreeAsync(CUdeviceptr ptr, CUstream stream, bool per_thread) {
  MutexLock lock(&mu_);
  uint64_t block = 0, bytes = 0;
  const uint64_t offset = ptr - base_;
  if (!allocator_->Lookup(offset, &block, &bytes) || block != offset ||
      table_[static_cast<uint32_t>(offset >> kChunkShift)].app_mapped) {  // VMM: not freeable
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (pending_frees_->Contains(offset)) return CUDA_ERROR_INVALID_VALUE;  // double free
  alloc_events_.Record(offset, bytes, /*freed=*/true);
  const uint32_t index = tracker_->IndexOf(stream, per_thread);
  const uint64_t seq = tracker_->issued(index);
  if (seq == 0 || tracker_->IsComplete(index, seq)) return FreeLocked(offset);
  pending_frees_->AddAfter(offset, index, seq);  // Note [pending frees]
  return CUDA_SUCCESS;
}

void ShimCore::ProcessDeferred() {
  if (!pending_frees_->empty()) {
    pending_frees_->ReleaseCompleted([this](uint64_t offset) {
      mu_.AssertHeld();          // called back from this call, under mu_
      (void)FreeLocked(offset);  // validated when it was queued
    });
  }
  if (!slot_releases_->empty()) slot_releases_->ReleaseCompleted();
  uses_->DropCompletedFences();
}

CUresult ShimCore::GetInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  MutexLock lock(&mu_);
  const uint64_t capacity = static_cast<uint64_t>(allocator_->max_committed_chunks())
                            << kChunkShift;
  *total = capacity;
  *free = allocator_->admissible_chunks() << kChunkShift;  // Note [shared admission]
  return CUDA_SUCCESS;
}

CUresult ShimCore::GetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  MutexLock lock(&mu_);
  uint64_t block = 0, bytes = 0;
  if (!allocator_->Lookup(ptr - base_, &block, &bytes) || pending_frees_->Contains(block)) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (table_[static_cast<uint32_t>(block >> kChunkShift)].app_mapped) {
    uint32_t first = 0;  // the cuMemMap range, as the driver answers
    if (const AppMapping* m = app_vmm_.MappingOf(table_.IndexOf(ptr), &first)) {
      block = static_cast<uint64_t>(first) << kChunkShift;
      bytes = static_cast<uint64_t>(m->count) << kChunkShift;
    }
  }
  if (base != nullptr) *base = base_ + block;
  if (size != nullptr) *size = bytes;
  return CUDA_SUCCESS;
}

bool ShimCore::FactsOf(CUdeviceptr ptr, AllocationFacts* facts) {
  uint64_t block = 0, bytes = 0;
  if (!allocator_->Lookup(ptr - base_, &block, &bytes) || pending_frees_->Contains(block)) {
    return false;
  }
  // Application VMM: the allocation is the cuMemMap range (Note [contiguous
  // mappings] in shim_core_app_vmm.cc).
  const AppMapping* mapping = nullptr;
  uint32_t mapping_first = 0;
  if (table_[static_cast<uint32_t>(block >> kChunkShift)].app_mapped) {
    mapping = app_vmm_.MappingOf(table_.IndexOf(ptr), &mapping_first);
    if (mapping != nullptr) {
      block = static_cast<uint64_t>(mapping_first) << kChunkShift;
      bytes = static_cast<uint64_t>(mapping->count) << kChunkShift;
    }
  }
  facts->context = context_;
  facts->device_ordinal = device_;
  facts->base = base_ + block;
  facts->bytes = bytes;
  auto [it, inserted] = buffer_ids_.try_emplace(block, 0);  // Note [buffer ids]
  if (inserted) it->second = next_buffer_id_++;
  facts->buffer_id = it->second;
  facts->ipc_capable = pool_->device_chunks_exportable();  // Note [shim ipc] in ipc_export.h
  if (mapping != nullptr) {  // Note [application VMM]: VMM memory, as the driver says
    facts->ipc_capable = false;
    if (const ChunkSpan r = app_vmm_.ReservationOf(mapping_first); r.count != 0) {
      facts->range_base = table_.AddressOf(r.first);
      facts->range_bytes = static_cast<uint64_t>(r.count) << kChunkShift;
    }
    if (const VirtualHandle* v = app_vmm_.Find(mapping->handle)) {
      facts->handle_types = v->prop.requestedHandleTypes;
    }
  }
  return true;
}

CUresult ShimCore::PointerAttribute(CUpointer_attribute attribute, void* data, CUdeviceptr ptr) {
  CUpointer_attribute known;
  if (!ReadPointerAttribute(&attribute, &known)) return CUDA_ERROR_INVALID_VALUE;
  MutexLock lock(&mu_);
  AllocationFacts facts;
  if (!FactsOf(ptr, &facts)) return CUDA_ERROR_INVALID_VALUE;
  return AnswerPointerAttribute(facts, known, data, ptr);
}

CUresult ShimCore::PointerAttributes(unsigned count, const CUpointer_attribute* attributes,
                                     void** data, CUdeviceptr ptr) {
  if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUpointer_attribute known;
  for (unsigned i = 0; i < count; ++i) {  // malformed: fail before writing anything
    if (data[i] == nullptr || !ReadPointerAttribute(&attributes[i], &known)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  MutexLock lock(&mu_);
  AllocationFacts facts;
  const bool live = FactsOf(ptr, &facts);
  for (unsigned i = 0; i < count; ++i) {
    (void)ReadPointerAttribute(&attributes[i], &known);
    std::memset(data[i], 0, PointerAttributeBytes(known));
    if (live) (void)AnswerPointerAttribute(facts, known, data[i], ptr);  // else zero
  }
  return CUDA_SUCCESS;
}

// ---- The operation's chunks (touch_: Note [touch set] in touch_set.h) ----------

bool ShimCore::WithinOneBlock(const MemRange& range) {
  if (range.bytes == 0 || !Owns(range.ptr)) return true;
  if (!table_.Contains(range.ptr)) return false;  // past every block (Note [sparse chunk table])
  uint64_t block = 0, bytes = 0;
  const uint64_t offset = range.ptr - base_;
  if (!allocator_->Lookup(offset, &block, &bytes)) {
    // The driver's own mapping in a range the application reserved here
    // (Note [application VMM]): the driver checks it.
    if (table_[table_.IndexOf(range.ptr)].kind != ChunkKind::kForeign ||
        range.bytes > table_.bytes() - offset) {
      return false;
    }
    const uint32_t last = static_cast<uint32_t>((offset + range.bytes - 1) >> kChunkShift);
    for (uint32_t c = table_.IndexOf(range.ptr); c <= last; ++c) {
      if (table_[c].kind != ChunkKind::kForeign) return false;
    }
    return true;
  }
  return range.bytes <= bytes - (offset - block);  // no overflow: offset < block + bytes
}

// ---- Residency -------------------------------------------------------------------

bool ShimCore::IsCapturing(CUstream handle) {
  if (captures_active_ == 0 || driver_->cuStreamIsCapturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (driver_->cuStreamIsCapturing(handle, &status) != CUDA_SUCCESS) return false;
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool ShimCore::ReclaimFreed(bool device, bool host) {
  return freed_->ReclaimOne(device, host).chunks > 0;
}

CUresult ShimCore::AcquireHost(uint32_t* slot) {
  if (pool_->AcquireHost(slot) == CUDA_SUCCESS) return CUDA_SUCCESS;
  ProcessDeferred();
  if (pool_->AcquireHost(slot) == CUDA_SUCCESS) return CUDA_SUCCESS;
  if (ReclaimFreed(/*device=*/false, /*host=*/true) && pool_->AcquireHost(slot) == CUDA_SUCCESS) {
    return CUDA_SUCCESS;
  }
  if (!slot_releases_->empty()) {
    const uint64_t copy_seq = slot_releases_->last_copy_seq();
    if (DeferCopyWait(copy_seq)) return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock]
    (void)tracker_->WaitFor(copy_index_, copy_seq);            // sticky on error
    ProcessDeferred();
    if (pool_->AcquireHost(slot) == CUDA_SUCCESS) return CUDA_SUCCESS;
  }
  // Note [waits outside the lock]: one demotion per attempt, finished by the
  // public call without mu_.
  if (call_.defer_waits &&
      (!call_.deferred.demotion.empty() || call_.deferred.demotion_wait.has_value() ||
       DeferDemotion(kDemotionBatch))) {
    return CUDA_ERROR_NOT_READY;
  }
  if (DemoteHostChunks(kDemotionBatch) && pool_->AcquireHost(slot) == CUDA_SUCCESS) {
    return CUDA_SUCCESS;
  }
  if (DeferHostReclaim(kDemotionBatch)) return CUDA_ERROR_NOT_READY;  // Note [host slots of ...]
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult ShimCore::BackAllOwned() {
  if (unbacked_owned_ == 0 && SpilledChunks() == 0 && table_.unmapped_count() == 0) {
    return CUDA_SUCCESS;
  }
  // The launch may reach every chunk: none already in host memory is demoted
  // to make room for the others (device chunks may still move to the host).
  for (uint32_t c = 0; c < table_.size(); ++c) {
    if (OwnedKind(table_[c].kind) && table_[c].residence == Residence::kHost) touch_->Chunk(c);
  }
  for (uint32_t c = 0; c < table_.size() &&
                       (unbacked_owned_ > 0 || SpilledChunks() > 0 || table_.unmapped_count() > 0);
       ++c) {
    const ChunkEntry& e = table_[c];
    if (OwnedKind(e.kind) && e.residence == Residence::kHost && e.unmapped) {
      if (const CUresult r = fills_->MapHostSlot(c); r != CUDA_SUCCESS) return r;
      continue;
    }
    if (!OwnedKind(e.kind) ||
        (e.residence != Residence::kUnbacked && e.residence != Residence::kNvme)) {
      continue;
    }
    touch_->Chunk(c);  // protect it from eviction by the chunks backed after it
    CUresult r = residency_->PageIn(c, /*may_evict=*/true);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult ShimCore::BeforeLaunch(CUfunction function, void** params, void** extra, CUstream stream,
                                bool per_thread, Ticket* ticket) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    return LaunchLocked(function, params, extra, stream, per_thread, ticket);
  });
}

// Inlined into BeforeLaunch, the launch fast path (docs/benchmarks.md): a
// call here costs about 40 instructions a launch in argument moves.
[[gnu::always_inline]] inline CUresult ShimCore::LaunchLocked(CUfunction function, void** params,
                                                              void** extra, CUstream stream,
                                                              bool per_thread, Ticket* ticket) {
  if (!call_.repeating) ++stats_.launches;
  if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
  touch_->Begin();
  bool decodable = true;
  const ParamLayout* layout = nullptr;  // null: no parameters, or an `extra` buffer
  if (params != nullptr) {
    layout = &layouts_.Of(function);
    decodable = layout->known;
    if (decodable) touch_->Args(*layout, params);
    if (touch_->has_segment_hits()) {
      touch_->Segments(pool_->device_limit() / kSegmentWindowDivisor);
    }
  } else if (extra != nullptr) {
    const void* buffer = nullptr;
    size_t bytes = 0;
    for (void** e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = e[1];
      } else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1] != nullptr) {
        bytes = *static_cast<const size_t*>(e[1]);
      } else {
        decodable = false;
        break;
      }
    }
    if (decodable && buffer != nullptr) touch_->Bytes(buffer, bytes);
  }
  const uint32_t index = tracker_->IndexOf(stream, per_thread);
  const bool capturing = IsCapturing(tracker_->HandleOf(index));
  if (!decodable) return OpaqueLocked(index, capturing, ticket);
  if (const Reach reach =
          HiddenReach(layout, params, /*extra_buffer=*/params == nullptr && extra != nullptr);
      reach != Reach::kNamed) {
    return FencedLocked(index, capturing, reach, ticket);
  }
  return MakeResident(index, /*host_wait=*/false, capturing, ticket);
}

CUresult ShimCore::OpaqueLocked(uint32_t index, bool capturing, Ticket* ticket) {
  if (!call_.repeating) ++stats_.opaque_launches;
  // The launch may reach chunks whose page-out is in flight.
  if (evictor_->DeferPageOutWait()) return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock]
  evictor_->FinishPageOut();
  touch_->Clear();
  fills_->Clear();
  CUresult r = BackAllOwned();
  touch_->Clear();
  if (r != CUDA_SUCCESS) {
    fills_->Commit(tracker_->issued(copy_index_));  // as in MakeResident: nothing is enqueued
    return r;
  }
  // Wait for every fill, then count the launch as a use of every chunk.
  const uint64_t all = tracker_->issued(copy_index_);
  const uint64_t need = all != 0 && !tracker_->IsComplete(copy_index_, all) ? all : 0;
  if ((r = fills_->Order(need, index, capturing)) != CUDA_SUCCESS) return r;
  if (capturing) return CUDA_SUCCESS;
  uses_->AddFence(index, tracker_->Issue(index));
  *ticket = tracker_->BeginEnqueue(index);
  return CUDA_SUCCESS;
}

CUresult ShimCore::BeforeOpaque(CUstream stream, bool per_thread, Ticket* ticket) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    if (!call_.repeating) ++stats_.launches;
    if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
    touch_->Begin();
    const uint32_t index = tracker_->IndexOf(stream, per_thread);
    return OpaqueLocked(index, IsCapturing(tracker_->HandleOf(index)), ticket);
  });
}

CUresult ShimCore::BeforeAccess(const MemRange* ranges, int count, CUstream stream, bool per_thread,
                                bool synchronous, Ticket* ticket) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    for (int i = 0; i < count; ++i) {
      if (!WithinOneBlock(ranges[i])) return CUDA_ERROR_INVALID_VALUE;  // as the driver answers
    }
    if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
    touch_->Begin();
    for (int i = 0; i < count; ++i) touch_->Range(ranges[i]);
    if (touch_->touched().empty()) return CUDA_SUCCESS;
    const uint32_t index = tracker_->IndexOf(stream, per_thread);
    const bool capturing = IsCapturing(tracker_->HandleOf(index));
    return MakeResident(index, synchronous, capturing, ticket);
  });
}

// ---- Streams, capture, budgets ----------------------------------------------------

void ShimCore::OnStreamDestroy(CUstream stream, bool per_thread) {
  MutexLock lock(&mu_);
  tracker_->Retire(stream, per_thread);
}

void ShimCore::OnCaptureBegin(CUstream stream, bool per_thread) {
  MutexLock lock(&mu_);
  ++captures_active_;
  // Cover everything issued so far: no event is recorded on it during capture.
  const uint32_t index = tracker_->IndexOf(stream, per_thread);
  CUevent ignored;
  (void)tracker_->Cover(index, tracker_->issued(index), &ignored);  // best effort
  // Nor on the legacy stream: while a blocking stream captures, recording
  // there fails and invalidates the capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  const uint32_t legacy = tracker_->IndexOf(nullptr, false);
  (void)tracker_->Cover(legacy, tracker_->issued(legacy), &ignored);
}

void ShimCore::OnCaptureEnd() {
  MutexLock lock(&mu_);
  if (captures_active_ > 0) --captures_active_;
}

CUresult ShimCore::TEST_Synchronize() {
  MutexLock lock(&mu_);
  CUresult r = tracker_->WaitForAll();
  evictor_->FinishPageOut();
  ProcessDeferred();
  return r;
}

CoreStats ShimCore::stats() {
  MutexLock lock(&mu_);
  CoreStats s = stats_;
  s.kernels_decoded_as_function = layouts_.counts().decoded_as_function;
  s.kernels_decoded_as_kernel = layouts_.counts().decoded_as_kernel;
  s.kernels_undecodable = layouts_.counts().undecodable;
  s.events_recorded = tracker_->events_recorded();
  s.device_chunks_in_use = pool_->device_in_use();
  s.device_chunk_limit = pool_->device_limit();
  s.device_chunks_peak = pool_->device_peak();
  s.host_slots_in_use = pool_->host_in_use();
  s.host_slot_limit = pool_->host_limit();
  s.committed_chunks = allocator_->committed_chunks();
  s.live_bytes = allocator_->live_bytes();
  s.spilled_chunks = SpilledChunks();
  return s;
}

UsageReport ShimCore::TakeUsage() {
  MutexLock lock(&mu_);
  UsageReport u;
  u.device_resident_bytes = static_cast<uint64_t>(pool_->device_in_use()) << kChunkShift;
  u.device_budget_bytes = static_cast<uint64_t>(device_budget_chunks_) << kChunkShift;
  u.host_resident_bytes = static_cast<uint64_t>(pool_->host_in_use()) << kChunkShift;
  u.allocated_bytes = allocator_->live_bytes();
  u.page_in_bytes = stats_.page_ins << kChunkShift;
  u.page_out_bytes = stats_.evictions << kChunkShift;
  u.nvme_resident_bytes = static_cast<uint64_t>(SpilledChunks()) << kChunkShift;
  u.nvme_write_bytes = stats_.demotions << kChunkShift;
  u.nvme_read_bytes = (stats_.promotion_reads + stats_.spill_prefetches) << kChunkShift;
  u.launches = stats_.launches;
  alloc_events_.TakeInto(&u);
  return u;
}

Residence ShimCore::TEST_ResidenceOf(CUdeviceptr ptr) {
  MutexLock lock(&mu_);
  if (!table_.Contains(ptr)) return Residence::kUnbacked;
  return table_[table_.IndexOf(ptr)].residence;
}

}  // namespace memvirt::shim

#include "shim/core/spill_manager.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "shim/core/log.h"

namespace memvirt::shim {
namespace {

// Host chunks demoted per store round: one device-to-host wait covers them.
constexpr size_t kDemoteBatch = 4;
// How far ahead prefetch candidates are asked for (the policy returns
// non-resident chunks in general; only the spilled ones are loaded here).
constexpr uint64_t kSpillPrefetchWindow = 64 * kChunkBytes;
// Candidates kept in order per scan of the chunk table (Note [demotion queue]
// in spill_manager.h).
constexpr size_t kDemotionQueue = 64;

}  // namespace

bool SpillManager::Usable(const Driver* driver, SpillTier* tier) {
  if (tier == nullptr || tier->staging_slots() == 0) return false;
  if (driver->cuMemcpyHtoDAsync_v2 == nullptr || driver->cuMemcpyDtoHAsync_v2 == nullptr) {
    MEMSHIM_LOG(kWarn, "the driver lacks async host copies; spill tier unused");
    return false;
  }
  return true;
}

SpillManager::SpillManager(const Parts& parts) : parts_(parts) {
  staging_.assign(parts_.tier->staging_slots(), StagingSlot{});
  spill_ids_.assign(parts_.table->size(), 0);  // grown by SetSpillId
  if (parts_.driver->cuMemHostRegister_v2 != nullptr) {
    // Pinned staging makes the copies asynchronous DMA on a real GPU; the
    // tier works (more slowly) without it.
    for (uint32_t s = 0; s < staging_.size(); ++s) {
      if (parts_.driver->cuMemHostRegister_v2(parts_.tier->staging(s), kChunkBytes, 0) !=
          CUDA_SUCCESS) {
        MEMSHIM_LOG(kInfo, "staging buffers not pinned; spill copies are synchronous");
        break;
      }
    }
  }
}

SpillManager::~SpillManager() {
  if (parts_.driver->cuMemHostUnregister != nullptr) {
    for (uint32_t s = 0; s < staging_.size(); ++s) {
      parts_.driver->cuMemHostUnregister(parts_.tier->staging(s));
    }
  }
}

bool SpillManager::ReadyStaging(uint32_t* slot) {
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    StagingSlot& st = staging_[s];
    if (st.state == StagingSlot::State::kCopying &&
        tracker().IsComplete(parts_.copy_index, st.copy_seq)) {
      st.state = StagingSlot::State::kFree;
    }
    if (st.state == StagingSlot::State::kFree) {
      *slot = s;
      return true;
    }
  }
  return false;
}

bool SpillManager::FinishLoadOrDefer(uint32_t slot, bool may_defer, SpillResult* res) {
  *res = tier().FinishLoad(slot, /*wait=*/!may_defer);
  if (!may_defer || *res != SpillResult::kPending) return false;
  if (parts_.owner->DeferLoadWait(slot)) return true;
  *res = tier().FinishLoad(slot, /*wait=*/true);
  return false;
}

CUresult SpillManager::AcquireStaging(uint32_t keep_chunk, bool may_defer, uint32_t* slot) {
  // Free (or its copy done) first, then wait for the oldest copy, then give
  // up a prefetched load (its chunk stays stored; nothing is lost).
  if (ReadyStaging(slot)) return CUDA_SUCCESS;
  uint32_t oldest = kNoIndex, victim_load = kNoIndex;
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    const StagingSlot& st = staging_[s];
    if (st.state == StagingSlot::State::kCopying) {
      if (oldest == kNoIndex || st.copy_seq < staging_[oldest].copy_seq) oldest = s;
    } else if (st.state != StagingSlot::State::kStoring && st.chunk != keep_chunk &&
               victim_load == kNoIndex) {
      victim_load = s;
    }
  }
  if (oldest != kNoIndex) {
    if (may_defer && parts_.owner->DeferCopyWait(staging_[oldest].copy_seq)) {
      return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock] in shim_core.h
    }
    ++stats().host_waits;
    // The copy reads the staging buffer: a failed wait leaves it unusable now.
    if (tracker().WaitFor(parts_.copy_index, staging_[oldest].copy_seq) != CUDA_SUCCESS) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    staging_[oldest].state = StagingSlot::State::kFree;
    *slot = oldest;
    return CUDA_SUCCESS;
  }
  if (victim_load == kNoIndex) return CUDA_ERROR_OUT_OF_MEMORY;
  StagingSlot& st = staging_[victim_load];
  SpillResult ignored;  // given up either way
  if (st.state == StagingSlot::State::kLoading &&
      FinishLoadOrDefer(victim_load, may_defer, &ignored)) {
    return CUDA_ERROR_NOT_READY;  // the repeat finds it loaded
  }
  st = StagingSlot{};
  --staging_loads_;
  *slot = victim_load;
  return CUDA_SUCCESS;
}

void SpillManager::SetSpillId(uint32_t chunk, uint64_t id) {
  if (chunk >= spill_ids_.size()) spill_ids_.resize(table().size(), 0);
  spill_ids_[chunk] = id;
}

bool SpillManager::DemotionEligible(uint32_t chunk, uint64_t stamp) {
  const ChunkEntry& e = table()[chunk];
  if (e.residence != Residence::kHost || !e.live_data || e.stamp == stamp) return false;
  if (e.hidden_target) return false;  // a kernel may reach it unnamed (Note [hidden reach])
  return e.fill_seq == 0 || tracker().IsComplete(parts_.copy_index, e.fill_seq);
}

void SpillManager::RebuildDemotionQueue(uint64_t stamp) {
  ++stats().demotion_scans;
  std::vector<uint32_t> soon;
  policy().PrefetchCandidatesInto(kSpillPrefetchWindow, &soon);
  std::unordered_map<uint32_t, uint32_t> urgency;  // chunk -> rank, higher = needed sooner
  for (size_t i = 0; i < soon.size(); ++i) {
    urgency.emplace(soon[i], static_cast<uint32_t>(soon.size() - i));
  }
  std::vector<DemotionCandidate> all;
  for (uint32_t c = 0; c < table().size(); ++c) {
    if (!DemotionEligible(c, stamp)) continue;
    uint32_t rank = 0;
    if (!urgency.empty()) {
      auto it = urgency.find(c);
      if (it != urgency.end()) rank = it->second;
    }
    all.push_back({rank, c, table()[c].stamp});
  }
  const size_t keep = std::min(all.size(), kDemotionQueue);
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep), all.end(),
                    [](const DemotionCandidate& a, const DemotionCandidate& b) {
                      if (a.rank != b.rank) return a.rank < b.rank;
                      return a.stamp != b.stamp ? a.stamp < b.stamp : a.chunk < b.chunk;
                    });
  demotion_queue_.assign(all.begin(), all.begin() + static_cast<ptrdiff_t>(keep));
  std::reverse(demotion_queue_.begin(), demotion_queue_.end());  // best victim last
}

SpillManager::Demoted SpillManager::Demote(uint32_t max, uint64_t stamp) {
  DemotionBatch batch;
  StartDemotion(max, stamp, &batch);
  if (batch.empty()) return Demoted{};
  ++stats().host_waits;
  if (tracker().WaitFor(parts_.copy_index, batch.copy_seq) == CUDA_SUCCESS) {
    StoreDemotion(&tier(), &batch);
  }
  return FinishDemotion(batch);
}

bool SpillManager::Demoting(uint32_t chunk) const {
  for (const StagingSlot& st : staging_) {
    if (st.state == StagingSlot::State::kStoring && st.chunk == chunk) return true;
  }
  return false;
}

void SpillManager::StartDemotion(uint32_t max, uint64_t stamp, DemotionBatch* batch,
                                 bool may_defer) {
  if (batch->empty()) batch->fences = parts_.owner->Fences();
  const size_t want = std::min<size_t>(max, kDemoteBatch);
  size_t started = 0;
  bool scanned = false;
  while (started < want) {
    if (!scanned && (demotion_queue_.empty() || demotion_queue_.back().rank > 0)) {
      RebuildDemotionQueue(stamp);
      scanned = true;
    }
    if (demotion_queue_.empty()) break;
    const DemotionCandidate d = demotion_queue_.back();
    demotion_queue_.pop_back();
    if (table()[d.chunk].stamp != d.stamp || !DemotionEligible(d.chunk, stamp)) continue;
    if (!parts_.owner->ChunkIdle(d.chunk)) continue;
    // A chunk staged already (by this batch or another one still storing)
    // may be queued again by the rebuild above.
    if (Demoting(d.chunk)) continue;
    uint32_t slot;
    if (AcquireStaging(kNoIndex, may_defer, &slot) != CUDA_SUCCESS) {
      demotion_queue_.push_back(d);
      break;
    }
    const ChunkEntry& e = table()[d.chunk];
    CUresult r = parts_.driver->cuMemcpyDtoHAsync_v2(tier().staging(slot), pool().mirror(e.phys),
                                                     kChunkBytes, parts_.copy_stream);
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "copy to the staging buffer failed (%d)", r);
      demotion_queue_.push_back(d);
      break;
    }
    staging_[slot].state = StagingSlot::State::kStoring;
    staging_[slot].chunk = d.chunk;
    batch->moves.push_back({d.chunk, slot, e.phys, e.stamp});
    ++started;
  }
  if (started > 0) batch->copy_seq = tracker().Issue(parts_.copy_index);
}

void SpillManager::StoreDemotion(SpillTier* tier, DemotionBatch* batch) {
  for (DemotionBatch::Move& m : batch->moves) m.stored = tier->Store(m.slot, &m.id);
}

SpillManager::Demoted SpillManager::FinishDemotion(const DemotionBatch& batch) {
  Demoted demoted;
  const bool unchanged_fences = parts_.owner->Fences() == batch.fences;
  for (const DemotionBatch::Move& m : batch.moves) {
    staging_[m.slot] = StagingSlot{};
    if (m.stored == SpillResult::kPending) {  // not stored: its staging copy may still run
      staging_[m.slot].state = StagingSlot::State::kCopying;
      staging_[m.slot].copy_seq = batch.copy_seq;
      continue;
    }
    if (m.stored != SpillResult::kOk) {
      ++stats().spill_failures;
      if (!spill_full_logged_) {
        MEMSHIM_LOG(kWarn, "spill tier refused a chunk (%s); it stays in host memory",
                    m.stored == SpillResult::kNoSpace ? "no space" : "store failed");
        spill_full_logged_ = true;
      }
      continue;
    }
    if (!CommitDemotion(m, unchanged_fences, &demoted)) tier().Discard(m.id);
  }
  return demoted;
}

bool SpillManager::CommitDemotion(const DemotionBatch::Move& m, bool unchanged_fences,
                                  Demoted* demoted) {
  ChunkEntry& e = table()[m.chunk];
  // Note [demotion outside the lock]: the stored copy is the chunk's bytes
  // only if nothing used the chunk since its staging copy was enqueued.
  if (!unchanged_fences || e.residence != Residence::kHost || e.phys != m.phys ||
      e.stamp != m.stamp || !e.live_data || e.hidden_target) {
    ++stats().demotions_superseded;
    return false;
  }
  const CUdeviceptr va = table().AddressOf(m.chunk);
  if (!e.unmapped && pool().UnmapAt(va) != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "unmapping a demoted chunk failed; it stays in host memory");
    return false;
  }
  table().SetUnmapped(m.chunk, false);
  pool().ReleaseHost(e.phys);
  e.residence = Residence::kNvme;
  e.phys = kNoIndex;
  e.fill_seq = 0;
  SetSpillId(m.chunk, m.id);
  ++spilled_;
  ++stats().demotions;
  ++demoted->moved;
  return true;
}

CUresult SpillManager::Promote(uint32_t chunk, uint64_t* stored) {
  ChunkEntry& e = table()[chunk];
  const CUdeviceptr va = table().AddressOf(chunk);
  // Where it goes first: eviction and demotion may run here, and they use
  // staging slots, so the load is started only afterwards (unless a
  // prefetch already holds the data).
  uint32_t dev = kNoIndex, host = kNoIndex;
  if (parts_.owner->AcquireDevice(&dev) != CUDA_SUCCESS) {
    dev = kNoIndex;
    if (parts_.owner->AcquireHost(&host) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto release = [&]() {
    if (dev != kNoIndex) pool().ReleaseDevice(dev);
    if (host != kNoIndex) pool().ReleaseHost(host);
  };
  uint32_t slot = kNoIndex;
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    const StagingSlot& st = staging_[s];
    if ((st.state == StagingSlot::State::kLoading || st.state == StagingSlot::State::kLoaded) &&
        st.chunk == chunk && st.id == spill_ids_[chunk]) {
      slot = s;
    }
  }
  SpillResult res = SpillResult::kOk;
  if (slot == kNoIndex) {
    if (const CUresult r = AcquireStaging(chunk, /*may_defer=*/true, &slot); r != CUDA_SUCCESS) {
      release();
      return r;
    }
    ++stats().promotion_reads;
    res = tier().StartLoad(spill_ids_[chunk], slot);
    if (res == SpillResult::kOk) {
      // Kept as a load started ahead: a wait deferred by the owner finds it.
      staging_[slot] = {StagingSlot::State::kLoading, chunk, spill_ids_[chunk], 0};
      ++staging_loads_;
    }
  }
  if (res == SpillResult::kOk && staging_[slot].state == StagingSlot::State::kLoading) {
    if (FinishLoadOrDefer(slot, /*may_defer=*/true, &res)) {
      release();
      return CUDA_ERROR_NOT_READY;
    }
  }
  if (staging_[slot].state == StagingSlot::State::kLoading ||
      staging_[slot].state == StagingSlot::State::kLoaded) {
    --staging_loads_;
  }
  staging_[slot] = StagingSlot{};
  if (res != SpillResult::kOk) {
    ++stats().spill_failures;
    release();
    MEMSHIM_LOG(kError, "loading a chunk from the spill tier failed; the access fails");
    return CUDA_ERROR_ECC_UNCORRECTABLE;
  }
  const CUmemGenericAllocationHandle target =
      dev != kNoIndex ? pool().device_handle(dev) : pool().host_handle(host);
  CUresult r = pool().MapAt(va, target);
  if (r != CUDA_SUCCESS) {
    release();
    return r;
  }
  const CUdeviceptr dst = dev != kNoIndex ? va : pool().mirror(host);
  r = parts_.driver->cuMemcpyHtoDAsync_v2(dst, tier().staging(slot), kChunkBytes,
                                          parts_.copy_stream);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "copy from the staging buffer failed (%d); the chunk stays stored", r);
    if (pool().UnmapAt(va) == CUDA_SUCCESS) {
      release();
    } else {  // still mapped: the target is not reused
      MEMSHIM_LOG(kError, "unmapping chunk %u failed; its promotion target is abandoned", chunk);
    }
    return r;
  }
  const uint64_t seq = tracker().Issue(parts_.copy_index);
  staging_[slot].state = StagingSlot::State::kCopying;
  staging_[slot].copy_seq = seq;
  e.fill_seq = seq;
  // The owner discards the stored copy once the fill is ordered.
  *stored = spill_ids_[chunk];
  spill_ids_[chunk] = 0;
  --spilled_;
  ++stats().promotions;
  if (dev != kNoIndex) {
    e.residence = Residence::kDevice;
    e.phys = dev;
    policy().OnResident(chunk);
    ++stats().page_ins;
  } else {
    e.residence = Residence::kHost;
    e.phys = host;
    ++stats().host_fallbacks;
  }
  return CUDA_SUCCESS;
}

void SpillManager::InstallLoaded() {
  if (staging_loads_ == 0) return;
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    StagingSlot& st = staging_[s];
    if (st.state == StagingSlot::State::kLoading) {
      const SpillResult res = tier().FinishLoad(s, /*wait=*/false);
      if (res == SpillResult::kPending) continue;
      if (res != SpillResult::kOk) {  // the demand path will retry and report it
        ++stats().spill_failures;
        st = StagingSlot{};
        --staging_loads_;
        continue;
      }
      st.state = StagingSlot::State::kLoaded;
    }
    if (st.state != StagingSlot::State::kLoaded) continue;
    ChunkEntry& e = table()[st.chunk];
    if (e.residence != Residence::kNvme || spill_ids_[st.chunk] != st.id) {  // freed meanwhile
      st = StagingSlot{};
      --staging_loads_;
      continue;
    }
    uint32_t host;
    if (pool().AcquireHost(&host) != CUDA_SUCCESS) continue;  // kept for the demand path
    const CUdeviceptr va = table().AddressOf(st.chunk);
    if (pool().MapAt(va, pool().host_handle(host)) != CUDA_SUCCESS) {  // kept for the demand path
      pool().ReleaseHost(host);
      continue;
    }
    if (parts_.driver->cuMemcpyHtoDAsync_v2(pool().mirror(host), tier().staging(s), kChunkBytes,
                                            parts_.copy_stream) != CUDA_SUCCESS) {
      if (pool().UnmapAt(va) == CUDA_SUCCESS) {
        pool().ReleaseHost(host);
      } else {  // still mapped: the slot is not reused
        MEMSHIM_LOG(kError, "unmapping chunk %u failed; a host slot is abandoned", st.chunk);
      }
      continue;
    }
    const uint64_t seq = tracker().Issue(parts_.copy_index);
    tier().Discard(st.id);
    spill_ids_[st.chunk] = 0;
    e.residence = Residence::kHost;
    e.phys = host;
    e.fill_seq = seq;
    --spilled_;
    st = StagingSlot{};
    st.state = StagingSlot::State::kCopying;
    st.copy_seq = seq;
    --staging_loads_;
  }
}

void SpillManager::Prefetch() {
  if (spilled_ == 0 || !policy().MayPrefetch()) return;
  InstallLoaded();
  // Half of the staging buffers may hold loads ahead of use (the rest stay
  // for demotions); a finished load waits there until a host slot is free or
  // its chunk is used, whichever comes first.
  uint32_t room = std::max<uint32_t>(1, static_cast<uint32_t>(staging_.size()) / 2);
  if (room <= staging_loads_) return;
  room -= staging_loads_;
  policy().PrefetchCandidatesInto(kSpillPrefetchWindow, &prefetch_);
  for (uint32_t c : prefetch_) {
    if (room == 0) break;
    if (table()[c].residence != Residence::kNvme) continue;
    bool loading = false;
    for (const StagingSlot& st : staging_) loading |= st.chunk == c;
    if (loading) continue;
    uint32_t slot;
    if (!ReadyStaging(&slot)) break;  // never waits here
    if (tier().StartLoad(spill_ids_[c], slot) != SpillResult::kOk) break;
    staging_[slot] = {StagingSlot::State::kLoading, c, spill_ids_[c], 0};
    ++staging_loads_;
    ++stats().spill_prefetches;
    --room;
  }
}

void SpillManager::Restore(uint32_t chunk, uint64_t stored) {
  ChunkEntry& e = table()[chunk];
  e.residence = Residence::kNvme;
  e.phys = kNoIndex;
  SetSpillId(chunk, stored);
  ++spilled_;
}

void SpillManager::Drop(uint32_t chunk) {
  ChunkEntry& e = table()[chunk];
  tier().Discard(spill_ids_[chunk]);
  spill_ids_[chunk] = 0;
  e.residence = Residence::kUnbacked;
  --spilled_;
}

}  // namespace memvirt::shim

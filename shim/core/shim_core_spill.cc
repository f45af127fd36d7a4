// ShimCore's use of the spill tier below host memory: Note [spill tier] in
// shim_core.h.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {
namespace {

// Host chunks demoted per store round: one device-to-host wait covers them.
constexpr size_t kDemoteBatch = 4;
// How far ahead prefetch candidates are asked for (the policy returns
// non-resident chunks in general; only the spilled ones are loaded here).
constexpr uint64_t kSpillPrefetchWindow = 64 * kChunkBytes;
// Candidates kept in order per scan of the chunk table (Note [demotion queue]).
constexpr size_t kDemotionQueue = 64;

}  // namespace

void ShimCore::InitSpill(SpillTier* spill) {
  if (spill == nullptr || spill->staging_slots() == 0) return;
  if (driver_->cuMemcpyHtoDAsync_v2 == nullptr || driver_->cuMemcpyDtoHAsync_v2 == nullptr) {
    MEMSHIM_LOG(kWarn, "the driver lacks async host copies; spill tier unused");
    return;
  }
  spill_ = spill;
  staging_.assign(spill->staging_slots(), StagingSlot{});
  spill_ids_.assign(table_.size(), 0);  // grown by SetSpillId
  if (driver_->cuMemHostRegister_v2 != nullptr) {
    // Pinned staging makes the copies asynchronous DMA on a real GPU; the
    // tier works (more slowly) without it.
    for (uint32_t s = 0; s < staging_.size(); ++s) {
      if (driver_->cuMemHostRegister_v2(spill->staging(s), kChunkBytes, 0) != CUDA_SUCCESS) {
        MEMSHIM_LOG(kInfo, "staging buffers not pinned; spill copies are synchronous");
        break;
      }
    }
  }
}

bool ShimCore::ReadyStaging(uint32_t* slot) {
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    StagingSlot& st = staging_[s];
    if (st.state == StagingSlot::State::kCopying &&
        tracker_->IsComplete(copy_index_, st.copy_seq)) {
      st.state = StagingSlot::State::kFree;
    }
    if (st.state == StagingSlot::State::kFree) {
      *slot = s;
      return true;
    }
  }
  return false;
}

bool ShimCore::AcquireStaging(uint32_t keep_chunk, uint32_t* slot) {
  // Free (or its copy done) first, then wait for the oldest copy, then give
  // up a prefetched load (its chunk stays stored; nothing is lost).
  if (ReadyStaging(slot)) return true;
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
    ++stats_.host_waits;
    // The copy reads the staging buffer: a failed wait leaves it unusable now.
    if (tracker_->WaitFor(copy_index_, staging_[oldest].copy_seq) != CUDA_SUCCESS) return false;
    staging_[oldest].state = StagingSlot::State::kFree;
    *slot = oldest;
    return true;
  }
  if (victim_load == kNoIndex) return false;
  StagingSlot& st = staging_[victim_load];
  if (st.state == StagingSlot::State::kLoading)
    (void)spill_->FinishLoad(victim_load, /*wait=*/true);
  st = StagingSlot{};
  --staging_loads_;
  *slot = victim_load;
  return true;
}

// Note [demotion queue]
//   Demotion victims are host chunks with live data that the operation being
//   prepared does not touch, whose last use completed and whose fill landed,
//   farthest expected next use first: chunks the policy expects soon (its
//   prefetch candidates, soonest first) last, the sooner the later, the
//   others least recently touched first (the stamp is the id of the last
//   operation). Finding them takes a scan of the chunk table and an ordering
//   of the candidates; once per batch of kDemoteBatch chunks that cost
//   O(reservation) per 8 MiB moved, more than the transfer on a large host
//   tier. A scan therefore keeps the best kDemotionQueue candidates in order
//   and later batches take from them, re-checking each one (still eligible,
//   stamp unchanged since the scan: a chunk touched since then is ranked
//   again by the next scan; one that is busy is left to it too). Chunks that
//   entered the host tier after the scan were touched after every queued
//   one, so the exact order would put them later anyway, except against
//   chunks the policy expects soon: the queue is scanned again before one of
//   those is taken, and whenever it runs out. At most one scan per call.
void ShimCore::SetSpillId(uint32_t chunk, uint64_t id) {
  if (chunk >= spill_ids_.size()) spill_ids_.resize(table_.size(), 0);
  spill_ids_[chunk] = id;
}

bool ShimCore::DemotionEligible(uint32_t chunk) {
  const ChunkEntry& e = table_[chunk];
  if (e.residence != Residence::kHost || !e.live_data || e.stamp == stamp_) return false;
  if (e.hidden_target) return false;  // a kernel may reach it unnamed (Note [hidden reach])
  return e.fill_seq == 0 || tracker_->IsComplete(copy_index_, e.fill_seq);
}

void ShimCore::RebuildDemotionQueue() {
  ++stats_.demotion_scans;
  std::vector<uint32_t> soon;
  policy_->PrefetchCandidatesInto(kSpillPrefetchWindow, &soon);
  std::unordered_map<uint32_t, uint32_t> urgency;  // chunk -> rank, higher = needed sooner
  for (size_t i = 0; i < soon.size(); ++i) {
    urgency.emplace(soon[i], static_cast<uint32_t>(soon.size() - i));
  }
  std::vector<DemotionCandidate> all;
  for (uint32_t c = 0; c < table_.size(); ++c) {
    if (!DemotionEligible(c)) continue;
    uint32_t rank = 0;
    if (!urgency.empty()) {
      auto it = urgency.find(c);
      if (it != urgency.end()) rank = it->second;
    }
    all.push_back({rank, c, table_[c].stamp});
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

bool ShimCore::DemoteHostChunks(uint32_t max) {
  if (spill_ == nullptr) return false;
  struct Move {
    uint32_t chunk, slot;
  };
  std::vector<Move> moves;
  const size_t want = std::min<size_t>(max, kDemoteBatch);
  bool scanned = false;
  while (moves.size() < want) {
    if (!scanned && (demotion_queue_.empty() || demotion_queue_.back().rank > 0)) {
      RebuildDemotionQueue();
      scanned = true;
    }
    if (demotion_queue_.empty()) break;
    const DemotionCandidate d = demotion_queue_.back();
    demotion_queue_.pop_back();
    if (table_[d.chunk].stamp != d.stamp || !DemotionEligible(d.chunk)) continue;
    if (!ChunkIdle(d.chunk)) continue;
    uint32_t slot;
    if (!AcquireStaging(kNoIndex, &slot)) {
      demotion_queue_.push_back(d);
      break;
    }
    const uint32_t c = d.chunk;
    CUresult r = driver_->cuMemcpyDtoHAsync_v2(spill_->staging(slot), pool_->mirror(table_[c].phys),
                                               kChunkBytes, copy_stream_);
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "copy to the staging buffer failed (%d)", r);
      demotion_queue_.push_back(d);
      break;
    }
    staging_[slot].state = StagingSlot::State::kStoring;
    moves.push_back({c, slot});
  }
  if (moves.empty()) return false;
  ++stats_.host_waits;
  const uint64_t seq = tracker_->Issue(copy_index_);
  const bool copied = tracker_->WaitFor(copy_index_, seq) == CUDA_SUCCESS;
  uint32_t demoted = 0;
  for (const Move& m : moves) {
    staging_[m.slot] = StagingSlot{};
    if (!copied) continue;
    uint64_t id = 0;
    const SpillResult res = spill_->Store(m.slot, &id);
    if (res != SpillResult::kOk) {
      ++stats_.spill_failures;
      if (!spill_full_logged_) {
        MEMSHIM_LOG(kWarn, "spill tier refused a chunk (%s); it stays in host memory",
                    res == SpillResult::kNoSpace ? "no space" : "store failed");
        spill_full_logged_ = true;
      }
      continue;
    }
    ChunkEntry& e = table_[m.chunk];
    const CUdeviceptr va = table_.AddressOf(m.chunk);
    if (!e.unmapped && pool_->UnmapAt(va) != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "unmapping a demoted chunk failed; it stays in host memory");
      spill_->Discard(id);
      continue;
    }
    if (e.unmapped) {
      e.unmapped = false;
      --unmapped_host_;
    }
    pool_->ReleaseHost(e.phys);
    e.residence = Residence::kNvme;
    e.phys = kNoIndex;
    e.fill_seq = 0;
    SetSpillId(m.chunk, id);
    ++stats_.spilled_chunks;
    ++stats_.demotions;
    ++demoted;
  }
  return demoted > 0;
}

CUresult ShimCore::Promote(uint32_t chunk) {
  ChunkEntry& e = table_[chunk];
  const CUdeviceptr va = table_.AddressOf(chunk);
  // Where it goes first: eviction and demotion may run here, and they use
  // staging slots, so the load is started only afterwards (unless a
  // prefetch already holds the data).
  uint32_t dev = kNoIndex, host = kNoIndex;
  if (AcquireDevice(&dev, /*may_evict=*/true) != CUDA_SUCCESS) {
    dev = kNoIndex;
    if (AcquireHost(&host) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto release = [&]() MEMSHIM_REQUIRES(mu_) {
    if (dev != kNoIndex) pool_->ReleaseDevice(dev);
    if (host != kNoIndex) pool_->ReleaseHost(host);
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
    if (!AcquireStaging(chunk, &slot)) {
      release();
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ++stats_.promotion_reads;
    res = spill_->StartLoad(spill_ids_[chunk], slot);
    if (res == SpillResult::kOk) res = spill_->FinishLoad(slot, /*wait=*/true);
  } else {
    if (staging_[slot].state == StagingSlot::State::kLoading) {
      res = spill_->FinishLoad(slot, /*wait=*/true);
    }
    --staging_loads_;
  }
  staging_[slot] = StagingSlot{};
  if (res != SpillResult::kOk) {
    ++stats_.spill_failures;
    release();
    MEMSHIM_LOG(kError, "loading a chunk from the spill tier failed; the access fails");
    return CUDA_ERROR_ECC_UNCORRECTABLE;
  }
  const CUmemGenericAllocationHandle target =
      dev != kNoIndex ? pool_->device_handle(dev) : pool_->host_handle(host);
  CUresult r = pool_->MapAt(va, target);
  if (r != CUDA_SUCCESS) {
    release();
    return r;
  }
  const CUdeviceptr dst = dev != kNoIndex ? va : pool_->mirror(host);
  r = driver_->cuMemcpyHtoDAsync_v2(dst, spill_->staging(slot), kChunkBytes, copy_stream_);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "copy from the staging buffer failed (%d); the chunk stays stored", r);
    if (pool_->UnmapAt(va) == CUDA_SUCCESS) {
      release();
    } else {  // still mapped: the target is not reused
      MEMSHIM_LOG(kError, "unmapping chunk %u failed; its promotion target is abandoned", chunk);
    }
    return r;
  }
  const uint64_t seq = tracker_->Issue(copy_index_);
  staging_[slot].state = StagingSlot::State::kCopying;
  staging_[slot].copy_seq = seq;
  e.fill_seq = seq;
  // The stored copy is discarded once the fill is ordered (CommitFills).
  fills_.push_back({chunk, kNoIndex, spill_ids_[chunk]});
  spill_ids_[chunk] = 0;
  --stats_.spilled_chunks;
  ++stats_.promotions;
  if (dev != kNoIndex) {
    e.residence = Residence::kDevice;
    e.phys = dev;
    policy_->OnResident(chunk);
    ++stats_.page_ins;
  } else {
    e.residence = Residence::kHost;
    e.phys = host;
    ++stats_.host_fallbacks;
  }
  return CUDA_SUCCESS;
}

void ShimCore::InstallLoaded() {
  if (staging_loads_ == 0) return;
  for (uint32_t s = 0; s < staging_.size(); ++s) {
    StagingSlot& st = staging_[s];
    if (st.state == StagingSlot::State::kLoading) {
      const SpillResult res = spill_->FinishLoad(s, /*wait=*/false);
      if (res == SpillResult::kPending) continue;
      if (res != SpillResult::kOk) {  // the demand path will retry and report it
        ++stats_.spill_failures;
        st = StagingSlot{};
        --staging_loads_;
        continue;
      }
      st.state = StagingSlot::State::kLoaded;
    }
    if (st.state != StagingSlot::State::kLoaded) continue;
    ChunkEntry& e = table_[st.chunk];
    if (e.residence != Residence::kNvme || spill_ids_[st.chunk] != st.id) {  // freed meanwhile
      st = StagingSlot{};
      --staging_loads_;
      continue;
    }
    uint32_t host;
    if (pool_->AcquireHost(&host) != CUDA_SUCCESS) continue;  // kept for the demand path
    const CUdeviceptr va = table_.AddressOf(st.chunk);
    if (pool_->MapAt(va, pool_->host_handle(host)) != CUDA_SUCCESS) {  // kept for the demand path
      pool_->ReleaseHost(host);
      continue;
    }
    if (driver_->cuMemcpyHtoDAsync_v2(pool_->mirror(host), spill_->staging(s), kChunkBytes,
                                      copy_stream_) != CUDA_SUCCESS) {
      if (pool_->UnmapAt(va) == CUDA_SUCCESS) {
        pool_->ReleaseHost(host);
      } else {  // still mapped: the slot is not reused
        MEMSHIM_LOG(kError, "unmapping chunk %u failed; a host slot is abandoned", st.chunk);
      }
      continue;
    }
    const uint64_t seq = tracker_->Issue(copy_index_);
    spill_->Discard(st.id);
    spill_ids_[st.chunk] = 0;
    e.residence = Residence::kHost;
    e.phys = host;
    e.fill_seq = seq;
    --stats_.spilled_chunks;
    st = StagingSlot{};
    st.state = StagingSlot::State::kCopying;
    st.copy_seq = seq;
    --staging_loads_;
  }
}

void ShimCore::StartSpillPrefetch() {
  if (spill_ == nullptr || stats_.spilled_chunks == 0 || !policy_->MayPrefetch()) return;
  InstallLoaded();
  // Half of the staging buffers may hold loads ahead of use (the rest stay
  // for demotions); a finished load waits there until a host slot is free or
  // its chunk is used, whichever comes first.
  uint32_t room = std::max<uint32_t>(1, static_cast<uint32_t>(staging_.size()) / 2);
  if (room <= staging_loads_) return;
  room -= staging_loads_;
  policy_->PrefetchCandidatesInto(kSpillPrefetchWindow, &prefetch_);
  for (uint32_t c : prefetch_) {
    if (room == 0) break;
    if (table_[c].residence != Residence::kNvme) continue;
    bool loading = false;
    for (const StagingSlot& st : staging_) loading |= st.chunk == c;
    if (loading) continue;
    uint32_t slot;
    if (!ReadyStaging(&slot)) break;  // never waits here
    if (spill_->StartLoad(spill_ids_[c], slot) != SpillResult::kOk) break;
    staging_[slot] = {StagingSlot::State::kLoading, c, spill_ids_[c], 0};
    ++staging_loads_;
    ++stats_.spill_prefetches;
    --room;
  }
}

void ShimCore::DropSpilled(uint32_t chunk) {
  ChunkEntry& e = table_[chunk];
  spill_->Discard(spill_ids_[chunk]);
  spill_ids_[chunk] = 0;
  e.residence = Residence::kUnbacked;
  --stats_.spilled_chunks;
}

}  // namespace memvirt::shim

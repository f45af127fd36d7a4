#include "shim/core/residency.h"

#include "shim/core/log.h"

namespace memvirt::shim {

CUresult Residency::MakeResidentSlow(uint32_t stream, bool host_wait, bool capturing,
                                     EnqueueWindow* ticket) {
  const TransitionParts& t = parts_.transition;
  ChunkTable& table = *t.table;
  PhysicalPool& pool = *t.pool;
  StreamTracker& tracker = *t.tracker;
  TouchSet& touch = *parts_.touch;
  FillBatch& fills = *parts_.fills;
  fills.Clear();
  CUresult result = CUDA_SUCCESS;
  parts_.evictor->set_launch_stream(capturing ? kNoIndex : stream);  // Note [eviction]
  for (const uint32_t c : touch.touched()) {
    if (table[c].residence == Residence::kDevice) continue;
    CUresult r = PageIn(c, /*may_evict=*/true);
    if (r != CUDA_SUCCESS) {
      result = r;
      break;
    }
  }
  parts_.evictor->set_launch_stream(kNoIndex);
  if (result == CUDA_SUCCESS && pool.device_in_use() < pool.device_limit()) {
    const uint64_t room = static_cast<uint64_t>(pool.device_limit() - pool.device_in_use())
                          << kChunkShift;
    t.policy->PrefetchCandidatesInto(room, &prefetch_);  // reused buffer: no allocation
    for (uint32_t c : prefetch_) {
      const ChunkEntry& e = table[c];
      if (!OwnedKind(e.kind) || e.residence != Residence::kHost) continue;
      if (PageIn(c, /*may_evict=*/false) != CUDA_SUCCESS) break;
      ++t.stats->prefetches;
    }
  }
  if (result == CUDA_SUCCESS && parts_.spill != nullptr) parts_.spill->Prefetch();
  (void)fills.Mark();
  if (result != CUDA_SUCCESS) {
    // Nothing will be enqueued; the chunks filled so far keep their fill_seq,
    // which whatever uses them next waits for.
    fills.Commit(tracker.issued(t.copy_index));
    return result;
  }
  uint64_t need = 0;
  for (const std::vector<uint32_t>* chunks : {&touch.touched(), &touch.reached()}) {
    for (uint32_t c : *chunks) {  // a reached chunk may have been prefetched just now
      const uint64_t fill = table[c].fill_seq;
      if (fill > need && !tracker.IsComplete(t.copy_index, fill)) need = fill;
    }
  }
  // Note [waits outside the lock]: a host wait for the fills (a synchronous
  // access, or one being captured) is made without the core lock. The fills
  // stay committed, as for a failed operation, and the repeat finds the
  // chunks filled (or fills them again, if another thread evicted them
  // meanwhile).
  if (need != 0 && (host_wait || capturing) && parts_.waits->DeferCopyWait(need)) {
    fills.Commit(tracker.issued(t.copy_index));
    return CUDA_ERROR_NOT_READY;
  }
  if (const CUresult r = fills.Order(need, stream, host_wait || capturing); r != CUDA_SUCCESS) {
    return r;
  }
  if (!capturing) RecordUses(stream, ticket);
  return CUDA_SUCCESS;
}

CUresult Residency::PageIn(uint32_t chunk, bool may_evict) {
  const TransitionParts& t = parts_.transition;
  ChunkTable& table = *t.table;
  PhysicalPool& pool = *t.pool;
  CoreWaits& waits = *parts_.waits;
  ChunkEntry& e = table[chunk];
  if (e.residence == Residence::kNvme) return may_evict ? Promote(chunk) : CUDA_ERROR_NOT_READY;
  if (e.residence == Residence::kHost && !parts_.uses->Idle(chunk)) {
    if (!may_evict) return CUDA_ERROR_NOT_READY;
    // Its host mapping may still be in use.
    if (waits.DeferChunkIdle(chunk)) return CUDA_ERROR_NOT_READY;  // Note [waits outside the lock]
    if (const CUresult r = waits.WaitChunkIdle(chunk); r != CUDA_SUCCESS) return r;
  }
  uint32_t dev = 0;
  CUresult r = parts_.evictor->AcquireDevice(&dev, may_evict);
  if (r != CUDA_SUCCESS) {
    // With a deferred wait the operation is repeated after it, instead of
    // running from the host tier (Note [waits outside the lock]).
    if (!may_evict || waits.WaitsDeferred()) return r;
    if (e.residence == Residence::kHost) {
      if (e.unmapped && (r = parts_.fills->MapHostSlot(chunk)) != CUDA_SUCCESS) return r;
      ++t.stats->host_fallbacks;  // runs from host memory; see Note [host mapping]
      return CUDA_SUCCESS;
    }
    if ((r = PlaceOnHost(chunk)) != CUDA_SUCCESS) return r;
    ++t.stats->host_fallbacks;
    return CUDA_SUCCESS;
  }
  // Note [failed transitions]: until the fill is committed the host slot
  // keeps the bytes; a failure puts it back at the address.
  if (e.residence == Residence::kHost) return parts_.fills->FillFromHost(chunk, dev);
  if ((r = pool.MapAt(table.AddressOf(chunk), pool.device_handle(dev))) != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "mapping a device chunk failed (%d)", r);
    pool.ReleaseDevice(dev);
    return r;
  }
  if (OwnedKind(e.kind)) parts_.owner->OnOwnedBacked();
  ++t.stats->first_touches;
  e.residence = Residence::kDevice;
  e.phys = dev;
  t.policy->OnResident(chunk);
  return CUDA_SUCCESS;
}

CUresult Residency::PlaceOnHost(uint32_t chunk) {
  const TransitionParts& t = parts_.transition;
  ChunkEntry& e = (*t.table)[chunk];
  uint32_t slot;
  if (parts_.owner->AcquireHost(&slot) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  if (const CUresult r = t.pool->MapAt(t.table->AddressOf(chunk), t.pool->host_handle(slot));
      r != CUDA_SUCCESS) {
    t.pool->ReleaseHost(slot);
    return r;
  }
  e.residence = Residence::kHost;
  e.phys = slot;
  if (OwnedKind(e.kind)) parts_.owner->OnOwnedBacked();
  return CUDA_SUCCESS;
}

CUresult Residency::Promote(uint32_t chunk) {
  uint64_t stored = 0;
  const CUresult r = parts_.spill->Promote(chunk, &stored);
  // The stored copy is discarded once the fill is ordered (FillBatch::Commit).
  if (r == CUDA_SUCCESS) parts_.fills->AddPromotion(chunk, stored);
  return r;
}

}  // namespace memvirt::shim

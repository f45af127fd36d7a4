#include "shim/core/evictor.h"

#include <algorithm>

namespace memvirt::shim {

CUresult Evictor::AcquireDevice(uint32_t* index, bool may_evict) {
  bool sustained = false;
  for (;;) {
    if (parts_.pool->AcquireDevice(index) == CUDA_SUCCESS) return CUDA_SUCCESS;
    if (!may_evict) return CUDA_ERROR_OUT_OF_MEMORY;
    const EvictionSizing size =
        SizeEviction(parts_.pool->device_limit(), sustained, parts_.lookahead_min_chunks);
    if (!EvictSome(size.batch, size.lookahead)) return CUDA_ERROR_OUT_OF_MEMORY;
    sustained = true;
  }
}

bool Evictor::EvictSome(uint32_t want, uint32_t lookahead) {
  CoreWaits& waits = *parts_.waits;
  if (ReclaimFreedDevice()) return true;
  want = std::clamp<uint32_t>(want, 1, kSustainedBatchMax);
  // Note [pipelined page-out]: the batch started last time has been copying
  // while the caller worked; finish it (usually without waiting) and start
  // the next one.
  if (!parts_.page_out->empty()) {
    if (DeferPageOutWait()) return false;
    if (FinishPageOut() > 0) {
      StartLookahead(lookahead);
      return true;
    }
  }
  // Note [eviction]: finished work made visible first (events on streams
  // with uncovered work), so that chunks whose work on other streams has
  // completed are candidates beside those of earlier work on the
  // operation's own stream.
  parts_.tracker->CoverAll();
  if (ReclaimFreedDevice()) return true;
  std::vector<uint32_t> picked;
  parts_.picker->PickIdle(want, launch_stream_, &picked);
  if (picked.empty()) {
    // Everything evictable is still in use: the best candidate, waited for
    // below.
    uint32_t v;
    if (parts_.picker->PickInUse(&v)) picked.push_back(v);
  }
  // Note [eviction]: victims still in use (by earlier work on the operation's
  // stream, or the best candidate above) are waited for before their
  // page-out: without the owner's lock if the operation defers its waits
  // (Note [waits outside the lock]: it runs again after them), else here.
  bool busy = false, deferred = false;
  for (uint32_t c : picked) {
    if (parts_.uses->Idle(c)) continue;
    busy = true;
    deferred |= waits.DeferChunkIdle(c);
  }
  if (deferred) return false;
  if (busy) {  // the common case, every victim idle, polls each once
    std::erase_if(picked, [this, &waits](uint32_t c) {
      return !parts_.uses->Idle(c) && waits.WaitChunkIdle(c) != CUDA_SUCCESS;  // in use: stays
    });
  }
  if (picked.empty()) return false;
  if (EvictBatch(picked) == 0) return false;
  StartLookahead(lookahead);
  return true;
}

bool Evictor::ReclaimFreedDevice() {
  return parts_.freed->ReclaimOne(/*device=*/true, /*host=*/false).chunks > 0;
}

uint32_t Evictor::FinishPageOut() {
  if (parts_.page_out->empty()) return 0;
  return parts_.page_out->Finish().moved;
}

bool Evictor::DeferPageOutWait() {
  return !parts_.page_out->empty() && parts_.waits->DeferCopyWait(parts_.page_out->copy_seq());
}

void Evictor::SettleBeforeFence() {
  PageOutPipeline& page_out = *parts_.page_out;
  if (page_out.empty()) return;
  if (parts_.tracker->IsComplete(parts_.copy_index, page_out.copy_seq())) {
    FinishPageOut();  // no wait: the copies completed
  } else {
    page_out.CancelAll();  // the chunks stay on the device, where the launch finds them
  }
}

uint32_t Evictor::StartPageOut(const std::vector<uint32_t>& victims, bool may_wait) {
  const PageOutPipeline::Started started = parts_.page_out->Start(victims, may_wait);
  if (started.dropped_owned != 0) parts_.owner->OnOwnedDropped(started.dropped_owned);
  return started.dropped;
}

uint32_t Evictor::EvictBatch(const std::vector<uint32_t>& victims) {
  const uint32_t dropped = StartPageOut(victims, /*may_wait=*/true);
  if (DeferPageOutWait()) return dropped;  // finished by the repeat, or by the next eviction
  return dropped + FinishPageOut();
}

void Evictor::StartLookahead(uint32_t count) {
  if (count == 0 || !lookahead_allowed_ || !parts_.page_out->empty()) return;
  std::vector<uint32_t> picked;
  parts_.picker->PickIdle(count, /*stream=*/kNoIndex, &picked);  // idle chunks only
  if (!picked.empty()) StartPageOut(picked, /*may_wait=*/false);
}

}  // namespace memvirt::shim

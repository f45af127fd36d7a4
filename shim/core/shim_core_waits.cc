// ShimCore's deferred waits (Note [waits outside the lock] in shim_core.h):
// what an operation records instead of waiting under mu_, and the wait made
// for it without mu_ before the operation runs again.
#include <algorithm>
#include <vector>

#include "shim/core/relaxed_capture_mode.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {

CUresult ShimCore::WaitChunkIdle(uint32_t chunk) {
  ++stats_.host_waits;
  return uses_->WaitIdle(chunk);
}

bool ShimCore::DeferWaitChunkIdle(uint32_t chunk) {
  // Nothing left to wait for: no need to defer.
  return call_.defer_waits && uses_->CollectPending(chunk, &call_.deferred.uses) > 0;
}

bool ShimCore::DeferUse(uint32_t stream, uint64_t seq) {
  if (tracker_->IsComplete(stream, seq)) return false;
  call_.deferred.uses.push_back({stream, seq});
  return true;
}

bool ShimCore::WaitForDeferred() {
  ++stats_.host_waits;
  DeferredWaits waits = call_.deferred.Take();
  bool ok = true;
  std::vector<CUevent> held;
  std::vector<WindowWait> windows;  // Note [enqueue window]: the repeat holds their events
  for (const StreamUse& u : waits.uses) {
    CUevent event = nullptr;
    WindowWait window;
    const CUresult r = tracker_->Hold(u.stream, u.seq, &event, &window);
    if (r == CUDA_ERROR_NOT_READY) {
      windows.push_back(window);
      ++stats_.window_waits;
      continue;
    }
    if (r != CUDA_SUCCESS) {
      ok = false;
      break;
    }
    if (event != nullptr) held.push_back(event);
  }
  const uint64_t host_bytes = static_cast<uint64_t>(waits.host_chunks) << kChunkShift;
  SpillManager::DemotionBatch& demotion = waits.demotion;
  CUevent demotion_event = nullptr;
  const bool demotion_held = !demotion.empty() && HoldDemotionCopies(demotion, &demotion_event);
  mu_.Unlock();
  // Note [frees of other cores]: the repeat tries once more either way.
  if (waits.peer_frees) (void)host_peers_->ReleasePeerFrees(this);
  // Note [host slots of other cores]: if nothing is given back, the repeats
  // of this call do not ask again (call_.host_peers_dry).
  const uint64_t reclaimed =
      host_bytes != 0 ? host_peers_->ReclaimHostFromPeers(this, host_bytes) : 0;
  for (const WindowWait& window : windows) window.Wait();
  {
    RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
    for (CUevent event : held) {
      if (driver_->cuEventSynchronize(event) != CUDA_SUCCESS) ok = false;
    }
  }
  // The repeat collects each load's outcome (a failed one fails it then).
  for (uint32_t slot : waits.loads) spill_tier_->WaitLoad(slot);
  // Another thread's batch finishes under mu_, which this thread does not hold.
  if (waits.demotion_wait) {
    demotions_finished_.wait(*waits.demotion_wait, std::memory_order_acquire);
  }
  if (!demotion.empty() && !StoreWithoutLock(demotion_held, demotion_event, &demotion)) {
    ok = false;  // the next run demotes under the lock and reports the error
  }
  mu_.Lock();
  if (!held.empty()) tracker_->Unhold(static_cast<uint32_t>(held.size()));
  if (demotion_event != nullptr) tracker_->Unhold(1);
  if (!demotion.empty()) FinishDemotion(&demotion);
  if (host_bytes != 0) {
    ++stats_.host_reclaims_asked;
    stats_.host_bytes_reclaimed += reclaimed;
    call_.host_peers_dry = reclaimed == 0;
  }
  if (waits.peer_frees) call_.peer_frees_asked = true;
  return ok;
}

bool ShimCore::DeferCopyWait(uint64_t copy_seq) {
  return call_.defer_waits && DeferUse(copy_index_, copy_seq);
}

bool ShimCore::DeferPeerFrees() {
  if (host_peers_ == nullptr || call_.peer_frees_asked) return false;
  call_.deferred.peer_frees = true;
  return true;
}

bool ShimCore::DeferHostReclaim(uint32_t chunks) {
  if (!call_.defer_waits || host_peers_ == nullptr || call_.host_peers_dry ||
      pool_->host_in_use_by_others() == 0) {
    return false;
  }
  call_.deferred.host_chunks = std::max(call_.deferred.host_chunks, chunks);
  return true;
}

}  // namespace memvirt::shim

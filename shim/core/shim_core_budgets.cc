// ShimCore under its control plane: device and host budgets, pinned
// application memory, and the host-tier demotions and give-backs the
// control plane (or another core) asks for (Note [shared host budget],
// Note [demotion outside the lock] in spill_manager.h).
#include "shim/core/log.h"
#include "shim/core/relaxed_capture_mode.h"
#include "shim/core/shim_core.h"
#include "shim/driver/scoped_context.h"

namespace memvirt::shim {

void ShimCore::EnforceDeviceLimit() {
  const uint64_t pinned_chunks = ChunksFor(app_pinned_bytes_);
  const uint32_t limit = pinned_chunks >= device_budget_chunks_
                             ? 0
                             : static_cast<uint32_t>(device_budget_chunks_ - pinned_chunks);
  pool_->SetDeviceLimit(limit);
  touch_->Begin();  // nothing is protected
  while (pool_->device_in_use() > pool_->device_limit()) {
    // The excess is known: nothing speculative.
    if (!evictor_->EvictSome(pool_->device_in_use() - pool_->device_limit(), /*lookahead=*/0)) {
      if (!WaitsDeferred()) {  // else repeated after the wait
        MEMSHIM_LOG(kWarn, "cannot shrink below %u device chunks yet", pool_->device_in_use());
      }
      break;
    }
  }
  pool_->SetDeviceLimit(limit);
}

void ShimCore::SetDeviceBudget(uint64_t bytes) {
  // Called from the control plane's thread, which has no current context:
  // page-outs need the core's (Note [foreign threads]).
  ScopedContext scoped(driver_, context_);
  (void)RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    if (!call_.repeating) {
      device_budget_chunks_ = static_cast<uint32_t>(bytes >> kChunkShift);
      policy_->OnBudgetChange(bytes);
    }
    return EnforceDeviceLimitOrDefer();
  });
}

CUresult ShimCore::EnforceDeviceLimitOrDefer() {
  EnforceDeviceLimit();
  // Note [waits outside the lock]: an eviction deferred for a wait is
  // repeated after it, with what is still over the limit.
  return WaitsDeferred() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

void ShimCore::SetHostBudget(uint64_t bytes) {
  ScopedContext scoped(driver_, context_);  // Note [foreign threads]
  MutexLock lock(&mu_);
  pool_->SetHostLimit(static_cast<uint32_t>(bytes >> kChunkShift));
  touch_->Begin();  // no operation is being prepared: every host chunk is a candidate
  // Note [shared host budget]: while the process is over the budget, this
  // core demotes its own host chunks.
  while (pool_->host_over_limit() > 0 && DemoteHostChunksOutsideLock(pool_->host_over_limit())) {
  }
  pool_->SetHostLimit(static_cast<uint32_t>(bytes >> kChunkShift));  // release freed slots
}

uint64_t ShimCore::DemoteHostBytes(uint64_t bytes) {
  ScopedContext scoped(driver_, context_);
  MutexLock lock(&mu_);
  touch_->Begin();
  const uint64_t before = stats_.demotions;
  auto moved = [&]() MEMSHIM_REQUIRES(mu_) { return (stats_.demotions - before) << kChunkShift; };
  while (moved() < bytes &&
         DemoteHostChunksOutsideLock(static_cast<uint32_t>(ChunksFor(bytes - moved())))) {
  }
  return moved();
}

uint64_t ShimCore::GiveBackHostBytes(uint64_t bytes) {
  ScopedContext scoped(driver_, context_);  // Note [foreign threads]
  MutexLock lock(&mu_);
  touch_->Begin();  // no operation is being prepared: every host chunk is a candidate
  const uint32_t want = static_cast<uint32_t>(ChunksFor(bytes));
  const uint32_t before = pool_->host_in_use();
  auto given = [&]() MEMSHIM_REQUIRES(mu_) {
    const uint32_t now = pool_->host_in_use();
    return now < before ? before - now : 0;
  };
  ProcessDeferred();  // releases the slots of completed page-in copies
  while (given() < want && ReclaimFreed(/*device=*/false, /*host=*/true)) {  // freed chunks' slots
  }
  while (given() < want && DemoteHostChunksOutsideLock(want - given())) {
  }
  // Freed chunks still on the device make room for the host chunks to move.
  while (given() < want && pool_->device_in_use() + (want - given()) > pool_->device_limit() &&
         ReclaimFreed(/*device=*/true, /*host=*/false)) {
  }
  if (given() < want) MoveHostChunksToFreeDevice(want - given());
  return static_cast<uint64_t>(given()) << kChunkShift;
}

bool ShimCore::ReleaseCompletedFrees() {
  ScopedContext scoped(driver_, context_);  // Note [foreign threads]
  MutexLock lock(&mu_);
  const size_t before = pending_frees_->size();
  ProcessDeferred();
  return pending_frees_->size() < before;
}

void ShimCore::MoveHostChunksToFreeDevice(uint32_t max) {
  fills_->Clear();
  for (uint32_t c = 0;
       c < table_.size() && fills_->size() < max && pool_->device_in_use() < pool_->device_limit();
       ++c) {
    const ChunkEntry& e = table_[c];
    if (!OwnedKind(e.kind) || e.residence != Residence::kHost || e.evicting || e.pinned ||
        !uses_->Idle(c)) {
      continue;
    }
    if (residency_->PageIn(c, /*may_evict=*/false) != CUDA_SUCCESS) break;
  }
  // Committed at once, as a launch's page-ins ordered on its stream: each
  // chunk's next use waits for its copy (fill_seq), and each slot goes back
  // once its copy completed (slot_releases_).
  const uint64_t copy_seq = fills_->Mark();
  fills_->Commit(copy_seq);
  if (copy_seq == 0) return;
  // Note [waits outside the lock]: the wait that frees the slots before
  // GiveBackHostBytes returns is made without mu_. A failed wait leaves the
  // slots to a later ProcessDeferred(), once the copies completed.
  if (DeferUse(copy_index_, copy_seq)) (void)WaitForDeferred();
  ProcessDeferred();  // the copies are complete: their host slots go back
}

void ShimCore::OnAppPhysicalCreate(CUmemGenericAllocationHandle handle, uint64_t bytes) {
  (void)RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    if (!call_.repeating) {
      app_handles_[handle] = bytes;
      app_pinned_bytes_ += bytes;
    }
    return EnforceDeviceLimitOrDefer();
  });
}

void ShimCore::OnAppPhysicalRelease(CUmemGenericAllocationHandle handle) {
  MutexLock lock(&mu_);
  auto it = app_handles_.find(handle);
  if (it == app_handles_.end()) return;
  app_pinned_bytes_ -= it->second;
  app_handles_.erase(it);
  EnforceDeviceLimit();
}

bool ShimCore::DemoteHostChunks(uint32_t max) {
  if (spill_ == nullptr) return false;
  return spill_->Demote(max, touch_->op()).moved > 0;
}

bool ShimCore::DemoteHostChunksOutsideLock(uint32_t max) {
  if (spill_ == nullptr) return false;
  SpillManager::DemotionBatch batch;
  // Note [waits outside the lock]: a staging buffer's copy (or a load ahead
  // given up for it) is waited for without mu_ too; a batch started is a
  // success (the waits for the rest are dropped).
  (void)RepeatWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    spill_->StartDemotion(max, touch_->op(), &batch, call_.defer_waits);
    return batch.empty() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
  });
  if (batch.empty()) return false;
  ++demotions_outside_;
  ++stats_.host_waits;
  CUevent event = nullptr;
  const bool held = HoldDemotionCopies(batch, &event);
  mu_.Unlock();
  (void)StoreWithoutLock(held, event, &batch);  // if not stored, nothing moves
  mu_.Lock();
  if (event != nullptr) tracker_->Unhold(1);
  return FinishDemotion(&batch) > 0;
}

bool ShimCore::HoldDemotionCopies(const SpillManager::DemotionBatch& batch, CUevent* event) {
  WindowWait window;  // the copy stream is used only under mu_: no window is open on it
  return tracker_->Hold(copy_index_, batch.copy_seq, event, &window) == CUDA_SUCCESS;
}

bool ShimCore::StoreWithoutLock(bool held, CUevent event, SpillManager::DemotionBatch* batch) {
  if (!held) return false;  // not stored: the chunks stay in host memory
  if (event != nullptr) {
    RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
    if (driver_->cuEventSynchronize(event) != CUDA_SUCCESS) return false;
  }
  SpillManager::StoreDemotion(spill_tier_, batch);
  return true;
}

bool ShimCore::DeferDemotion(uint32_t max) {
  if (spill_ == nullptr || !call_.defer_waits) return false;
  const size_t copy_waits = call_.deferred.uses.size();
  spill_->StartDemotion(max, touch_->op(), &call_.deferred.demotion, /*may_defer=*/true);
  if (!call_.deferred.demotion.empty()) {
    ++demotions_outside_;
    return true;
  }
  if (call_.deferred.uses.size() > copy_waits) return true;  // a staging buffer's copy to wait for
  if (demotions_outside_ == 0) return false;
  call_.deferred.demotion_wait = demotions_finished_.load(std::memory_order_relaxed);
  return true;
}

uint32_t ShimCore::FinishDemotion(SpillManager::DemotionBatch* batch) {
  const SpillManager::Demoted demoted = spill_->FinishDemotion(*batch);
  *batch = SpillManager::DemotionBatch{};
  --demotions_outside_;
  demotions_finished_.fetch_add(1, std::memory_order_release);
  demotions_finished_.notify_all();
  return demoted.moved;
}

}  // namespace memvirt::shim

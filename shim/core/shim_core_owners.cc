// The narrow interfaces through which ShimCore's pieces call back into it
// (page-out host slots, waits, residency, evictor, spill manager owners).
// Each runs with mu_ held: the piece calling it is reached only under mu_.
#include "shim/core/shim_core.h"

namespace memvirt::shim {

CUresult ShimCore::PageOutHostSlots::AcquireWaiting(uint32_t* slot) {
  core_->mu_.AssertHeld();  // page_out_ calls it from Start()
  return core_->AcquireHost(slot);
}

void ShimCore::PageOutHostSlots::ReleaseAfter(uint32_t slot, uint64_t copy_seq) {
  core_->mu_.AssertHeld();  // page_out_ calls it from Finish()
  core_->slot_releases_->Add(slot, copy_seq);
}

bool ShimCore::Waits::DeferChunkIdle(uint32_t chunk) {
  core_->mu_.AssertHeld();  // evictor_ and residency_ call it under mu_
  return core_->DeferWaitChunkIdle(chunk);
}

bool ShimCore::Waits::DeferCopyWait(uint64_t copy_seq) {
  core_->mu_.AssertHeld();  // evictor_ and residency_ call it under mu_
  return core_->DeferCopyWait(copy_seq);
}

CUresult ShimCore::Waits::WaitChunkIdle(uint32_t chunk) {
  core_->mu_.AssertHeld();  // evictor_ and residency_ call it under mu_
  return core_->WaitChunkIdle(chunk);
}

bool ShimCore::Waits::WaitsDeferred() const {
  core_->mu_.AssertHeld();  // evictor_ and residency_ call it under mu_
  return core_->WaitsDeferred();
}

CUresult ShimCore::ResidencyOwner::AcquireHost(uint32_t* slot) {
  core_->mu_.AssertHeld();  // residency_ calls it from PlaceOnHost()
  return core_->AcquireHost(slot);
}

void ShimCore::ResidencyOwner::OnOwnedBacked() {
  core_->mu_.AssertHeld();  // residency_ calls it when it backs a chunk
  --core_->unbacked_owned_;
}

void ShimCore::EvictorOwner::OnOwnedDropped(uint32_t count) {
  core_->mu_.AssertHeld();  // evictor_ calls it when it starts page-outs
  core_->unbacked_owned_ += count;
}

bool ShimCore::SpillOwner::ChunkIdle(uint32_t chunk) {
  core_->mu_.AssertHeld();  // spill_ calls it from DemoteHostChunks()
  return core_->uses_->Idle(chunk);
}

CUresult ShimCore::SpillOwner::AcquireDevice(uint32_t* index) {
  core_->mu_.AssertHeld();  // spill_ calls it from Promote()
  return core_->evictor_->AcquireDevice(index, /*may_evict=*/true);
}

CUresult ShimCore::SpillOwner::AcquireHost(uint32_t* slot) {
  core_->mu_.AssertHeld();  // spill_ calls it from Promote()
  // Note [waits outside the lock]: the device chunk was deferred for a wait;
  // the promotion is repeated after it rather than placed in a host slot.
  if (core_->WaitsDeferred()) return CUDA_ERROR_NOT_READY;
  return core_->AcquireHost(slot);
}

bool ShimCore::SpillOwner::DeferLoadWait(uint32_t slot) {
  core_->mu_.AssertHeld();  // spill_ calls it from Promote()
  if (!core_->call_.defer_waits) return false;
  core_->call_.deferred.loads.push_back(slot);
  return true;
}

bool ShimCore::SpillOwner::DeferCopyWait(uint64_t copy_seq) {
  core_->mu_.AssertHeld();  // spill_ calls it from Promote()
  return core_->DeferCopyWait(copy_seq);
}

uint64_t ShimCore::SpillOwner::Fences() {
  core_->mu_.AssertHeld();  // spill_ calls it from StartDemotion() and FinishDemotion()
  return core_->uses_->fences();
}

}  // namespace memvirt::shim

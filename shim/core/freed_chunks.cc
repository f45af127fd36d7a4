#include "shim/core/freed_chunks.h"

namespace memvirt::shim {

void FreedChunks::Add(uint32_t chunk) {
  ChunkEntry& e = (*parts_.table)[chunk];
  if (e.dead_listed) return;  // once: warm blocks are freed again and again
  e.dead_listed = true;
  list_.push_back(chunk);
}

bool FreedChunks::Release(uint32_t chunk, Released* released) {
  ChunkEntry& e = (*parts_.table)[chunk];
  if (!e.unmapped && parts_.pool->UnmapAt(parts_.table->AddressOf(chunk)) != CUDA_SUCCESS) {
    return false;  // still mapped: tried again later
  }
  parts_.table->SetUnmapped(chunk, false);
  if (e.residence == Residence::kDevice) {
    parts_.pool->ReleaseDevice(e.phys);
  } else {
    parts_.pool->ReleaseHost(e.phys);
  }
  e.residence = Residence::kUnbacked;
  parts_.policy->OnEvicted(chunk);
  ++parts_.stats->drops;
  ++released->chunks;
  return true;
}

FreedChunks::Released FreedChunks::ReclaimOne(bool device, bool host) {
  Released released;
  size_t k = 0;
  for (size_t i = 0; i < list_.size(); ++i) {
    const uint32_t c = list_[i];
    ChunkEntry& e = (*parts_.table)[c];
    if (OwnedKind(e.kind) || e.residence == Residence::kUnbacked) {
      e.dead_listed = false;  // reused or already released: leaves the list
      continue;
    }
    const bool wanted =
        (device && e.residence == Residence::kDevice) || (host && e.residence == Residence::kHost);
    // A page-out copy reads it, or an export holds it, or work uses it.
    if (released.chunks > 0 || !wanted || e.evicting || e.pinned || !uses_->Idle(c) ||
        !Release(c, &released)) {
      list_[k++] = c;
      continue;
    }
    e.dead_listed = false;
  }
  list_.resize(k);
  return released;
}

FreedChunks::Released FreedChunks::ReleaseHostSlots(uint32_t first, uint32_t count) {
  Released released;
  for (uint32_t c = first; c < first + count; ++c) {
    const ChunkEntry& e = (*parts_.table)[c];
    if (e.residence != Residence::kHost || e.evicting || e.pinned || !uses_->Idle(c)) continue;
    (void)Release(c, &released);  // kUnbacked: leaves the list at its next scan
  }
  return released;
}

}  // namespace memvirt::shim

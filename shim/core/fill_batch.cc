#include "shim/core/fill_batch.h"

#include "shim/core/log.h"

namespace memvirt::shim {

uint64_t FillBatch::Mark() {
  bool host_fills = false;
  for (const Fill& f : fills_) host_fills |= f.host_slot != kNoIndex;
  if (!host_fills) return 0;
  const uint64_t copy_seq = parts_.tracker->Issue(parts_.copy_index);
  for (const Fill& f : fills_) {
    if (f.host_slot != kNoIndex) (*parts_.table)[f.chunk].fill_seq = copy_seq;
  }
  return copy_seq;
}

void FillBatch::Commit(uint64_t copy_seq) {
  for (const Fill& f : fills_) {
    if (f.host_slot != kNoIndex) {
      releases_->Add(f.host_slot, copy_seq);
    } else {
      spill_->Discard(f.spill_id);
    }
  }
  fills_.clear();
}

void FillBatch::Undo() {
  ChunkTable& table = *parts_.table;
  PhysicalPool& pool = *parts_.pool;
  for (size_t i = fills_.size(); i-- > 0;) {
    const Fill& f = fills_[i];
    ChunkEntry& e = table[f.chunk];
    const bool on_device = e.residence == Residence::kDevice;
    if (pool.UnmapAt(table.AddressOf(f.chunk)) == CUDA_SUCCESS) {
      if (on_device) {
        pool.ReleaseDevice(e.phys);
      } else {
        pool.ReleaseHost(e.phys);
      }
    } else {  // still mapped: the target is not reused
      MEMSHIM_LOG(kError, "unmapping chunk %u failed; its fill target is abandoned", f.chunk);
    }
    if (on_device) parts_.policy->OnEvicted(f.chunk);
    e.fill_seq = 0;
    if (f.host_slot != kNoIndex) {
      e.residence = Residence::kHost;
      e.phys = f.host_slot;
      (void)MapHostSlot(f.chunk);  // a failure marks it unmapped: mapped at its next use
    } else {
      spill_->Restore(f.chunk, f.spill_id);
    }
  }
  fills_.clear();
}

CUresult FillBatch::MapHostSlot(uint32_t chunk) {
  ChunkTable& table = *parts_.table;
  const CUresult r =
      parts_.pool->MapAt(table.AddressOf(chunk), parts_.pool->host_handle(table[chunk].phys));
  table.SetUnmapped(chunk, r != CUDA_SUCCESS);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "mapping chunk %u's host slot failed (%d); it is mapped at its next use",
                chunk, r);
  }
  return r;
}

}  // namespace memvirt::shim

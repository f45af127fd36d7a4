#include "shim/core/fill_batch.h"

#include "shim/core/log.h"
#include "shim/core/relaxed_capture_mode.h"

namespace memvirt::shim {

CUresult FillBatch::FillFromHost(uint32_t chunk, uint32_t dev) {
  ChunkTable& table = *parts_.table;
  PhysicalPool& pool = *parts_.pool;
  ChunkEntry& e = table[chunk];
  const CUdeviceptr va = table.AddressOf(chunk);
  CUresult r;
  if (!e.unmapped && (r = pool.UnmapAt(va)) != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "unmapping a host-tier chunk failed (%d)", r);
    pool.ReleaseDevice(dev);
    return r;
  }
  if ((r = pool.MapAt(va, pool.device_handle(dev))) != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "mapping a device chunk failed (%d); the chunk stays in host memory", r);
    pool.ReleaseDevice(dev);
    (void)MapHostSlot(chunk);  // a failure marks it unmapped: mapped at its next use
    return r;
  }
  if (e.live_data) {
    r = parts_.driver->cuMemcpyDtoDAsync_v2(va, pool.mirror(e.phys), kChunkBytes,
                                            parts_.copy_stream);
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "page-in copy failed (%d); the chunk stays in host memory", r);
      ReturnToSlot(chunk, dev);
      return r;
    }
  }
  AddHostFill(chunk, e.phys);
  table.SetUnmapped(chunk, false);
  e.residence = Residence::kDevice;
  e.phys = dev;
  ++parts_.stats->page_ins;
  parts_.policy->OnResident(chunk);
  return CUDA_SUCCESS;
}

void FillBatch::ReturnToSlot(uint32_t chunk, uint32_t dev) {
  PhysicalPool& pool = *parts_.pool;
  if (pool.UnmapAt(parts_.table->AddressOf(chunk)) == CUDA_SUCCESS) {
    pool.ReleaseDevice(dev);
  } else {  // still mapped: the device chunk is not reused
    MEMSHIM_LOG(kError, "unmapping chunk %u failed; its device chunk is abandoned", chunk);
  }
  (void)MapHostSlot(chunk);  // a failure marks it unmapped: mapped at its next use
}

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

CUresult FillBatch::Order(uint64_t need, uint32_t stream, bool host_wait) {
  StreamTracker& tracker = *parts_.tracker;
  CUresult r = CUDA_SUCCESS;
  if (need != 0) {
    CUevent event = nullptr;
    r = tracker.Cover(parts_.copy_index, need, &event);
    if (r == CUDA_SUCCESS && event != nullptr) {
      RelaxedCaptureMode relaxed(parts_.driver);  // Note [relaxed driver sequences]
      if (host_wait) {
        ++parts_.stats->host_waits;
        r = parts_.driver->cuEventSynchronize(event);
      } else {
        r = parts_.driver->cuStreamWaitEvent(tracker.HandleOf(stream), event, 0);
      }
    }
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kWarn, "ordering work after its page-ins failed (%d); waiting on the host", r);
      ++parts_.stats->host_waits;
      r = tracker.WaitFor(parts_.copy_index, need);
    }
  }
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError, "page-ins could not be awaited (%d); the operation fails", r);
    Undo();
    return r;
  }
  Commit(tracker.issued(parts_.copy_index));
  return CUDA_SUCCESS;
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

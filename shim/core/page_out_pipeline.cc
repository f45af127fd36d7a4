#include "shim/core/page_out_pipeline.h"

#include "shim/core/log.h"

namespace memvirt::shim {

PageOutPipeline::Started PageOutPipeline::Start(const std::vector<uint32_t>& victims,
                                                bool may_wait) {
  ChunkTable& table = *parts_.table;
  PhysicalPool& pool = *parts_.pool;
  Started started;
  const size_t before = moves_.size();
  for (uint32_t v : victims) {
    ChunkEntry& e = table[v];
    if (!e.live_data) {  // dead data: reclaimed at once, without a copy
      if (pool.UnmapAt(table.AddressOf(v)) != CUDA_SUCCESS) continue;
      pool.ReleaseDevice(e.phys);
      e.residence = Residence::kUnbacked;
      if (OwnedKind(e.kind)) ++started.dropped_owned;
      parts_.policy->OnEvicted(v);
      ++parts_.stats->drops;
      ++started.dropped;
      continue;
    }
    uint32_t slot;
    if ((may_wait ? parts_.host_slots->AcquireWaiting(&slot) : pool.AcquireHost(&slot)) !=
        CUDA_SUCCESS) {
      break;
    }
    const CUresult r = parts_.driver->cuMemcpyDtoDAsync_v2(pool.mirror(slot), table.AddressOf(v),
                                                           kChunkBytes, parts_.copy_stream);
    if (r != CUDA_SUCCESS) {
      MEMSHIM_LOG(kError, "page-out copy failed (%d); chunk stays on the device", r);
      pool.ReleaseHost(slot);
      break;
    }
    e.evicting = true;
    moves_.push_back({v, slot, false});
  }
  if (moves_.size() > before) {
    copy_seq_ = parts_.tracker->Issue(parts_.copy_index);
    // An event right behind the page-outs: waiting for them later does not
    // wait for the page-ins enqueued after them.
    CUevent ignored;
    // Finish() records on demand if this fails.
    (void)parts_.tracker->Cover(parts_.copy_index, copy_seq_, &ignored);
  }
  return started;
}

void PageOutPipeline::Cancel(uint32_t chunk) {
  for (Move& m : moves_) {
    if (m.chunk == chunk && !m.cancelled) {
      m.cancelled = true;  // its slot is released once the copy is done
      ++parts_.stats->cancelled_page_outs;
    }
  }
  (*parts_.table)[chunk].evicting = false;
}

void PageOutPipeline::CancelAll() {
  for (const Move& m : moves_) {
    if (!m.cancelled) Cancel(m.chunk);
  }
}

PageOutPipeline::Finished PageOutPipeline::Finish() {
  Finished finished;
  if (moves_.empty()) return finished;
  ChunkTable& table = *parts_.table;
  PhysicalPool& pool = *parts_.pool;
  ++parts_.stats->host_waits;
  if (const CUresult r = parts_.tracker->WaitFor(parts_.copy_index, copy_seq_); r != CUDA_SUCCESS) {
    // Note [failed transitions]: the host copies may be incomplete; the
    // device copies stay authoritative.
    MEMSHIM_LOG(kError, "page-out copies did not complete cleanly (%d); chunks stay on the device",
                r);
    for (const Move& m : moves_) {
      if (!m.cancelled) table[m.chunk].evicting = false;
      parts_.host_slots->ReleaseAfter(m.slot, copy_seq_);
    }
    moves_.clear();
    return finished;
  }
  for (const Move& m : moves_) {
    ChunkEntry& e = table[m.chunk];
    if (m.cancelled) {  // touched meanwhile: the device copy stays authoritative
      pool.ReleaseHost(m.slot);
      continue;
    }
    e.evicting = false;
    const CUdeviceptr va = table.AddressOf(m.chunk);
    CUresult r = pool.UnmapAt(va);
    if (r != CUDA_SUCCESS) {  // still mapped on the device
      MEMSHIM_LOG(kError, "unmapping an evicted chunk failed (%d); it stays on the device", r);
      pool.ReleaseHost(m.slot);
      continue;
    }
    if ((r = pool.MapAt(va, pool.host_handle(m.slot))) != CUDA_SUCCESS) {
      if (pool.MapAt(va, pool.device_handle(e.phys)) == CUDA_SUCCESS) {
        MEMSHIM_LOG(kError,
                    "mapping an evicted chunk's host slot failed (%d); it stays on the "
                    "device",
                    r);
        pool.ReleaseHost(m.slot);
        continue;
      }
      // Neither mapping could be put back; the host slot holds the bytes
      // (its copy completed): the chunk moves there, mapped at its next use.
      MEMSHIM_LOG(kError, "remapping an evicted chunk failed (%d); it is mapped at its next use",
                  r);
      parts_.table->SetUnmapped(m.chunk, true);
    }
    pool.ReleaseDevice(e.phys);
    e.residence = Residence::kHost;
    e.phys = m.slot;
    parts_.policy->OnEvicted(m.chunk);
    ++parts_.stats->evictions;
    ++finished.moved;
  }
  moves_.clear();
  return finished;
}

}  // namespace memvirt::shim

#include "shim/core/pending_frees.h"

namespace memvirt::shim {

bool PendingFrees::Contains(uint64_t offset) const {
  for (const Entry& e : entries_) {
    if (e.offset == offset) return true;
  }
  return false;
}

bool PendingFrees::BlockIdle(uint64_t offset) {
  const ChunkEntry& e = (*table_)[static_cast<uint32_t>(offset >> kChunkShift)];
  if (!OwnedKind(e.kind)) return true;
  for (uint32_t c = e.owner_first; c < e.owner_first + e.owner_count; ++c) {
    if (!uses_->Idle(c)) return false;
  }
  return true;
}

void PendingFrees::AddUntilIdle(uint64_t offset) { entries_.push_back({offset, kNoIndex, 0}); }

void PendingFrees::AddAfter(uint64_t offset, uint32_t stream, uint64_t seq) {
  entries_.push_back({offset, stream, seq});
  if (entries_.size() > kCoverAfter) {
    CUevent ignored;
    (void)tracker_->Cover(stream, seq, &ignored);  // a later poll retries on failure
  }
}

bool PendingFrees::CollectWaits(std::vector<StreamUse>* waits) {
  const size_t before = waits->size();
  for (const Entry& f : entries_) {
    if (f.stream == kNoIndex) {
      const ChunkEntry& e = (*table_)[static_cast<uint32_t>(f.offset >> kChunkShift)];
      for (uint32_t c = e.owner_first; c < e.owner_first + e.owner_count; ++c) {
        uses_->CollectPending(c, waits);
      }
    } else if (!tracker_->IsComplete(f.stream, f.seq)) {
      waits->push_back({f.stream, f.seq});
    }
  }
  return waits->size() > before;
}

uint32_t PendingFrees::WaitAll() {
  uint32_t waits = 0;
  for (const Entry& f : entries_) {
    if (f.stream == kNoIndex) {
      const ChunkEntry& e = (*table_)[static_cast<uint32_t>(f.offset >> kChunkShift)];
      for (uint32_t c = e.owner_first; c < e.owner_first + e.owner_count; ++c) {
        ++waits;
        // A failed wait leaves the block pending; the allocation may fail.
        if (uses_->WaitIdle(c) != CUDA_SUCCESS) break;
      }
    } else {
      (void)tracker_->WaitFor(f.stream, f.seq);  // an error ends the wait (sticky)
    }
  }
  return waits;
}

}  // namespace memvirt::shim

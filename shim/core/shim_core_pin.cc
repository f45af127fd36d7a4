// Pinning blocks on the device for export (legacy IPC, shim/core/ipc_export.h).
//
// Note [pinned blocks]
//   A block shared with another process through cuIpcGetMemHandle is mapped
//   there onto the same physical device chunks (exported as file
//   descriptors), which the other process reads and writes without the core
//   seeing it. So while it is shared, each of its chunks must stay the one
//   device chunk at its address: PinBlock makes the block resident like a
//   synchronous copy would (BeforeAccess, fills awaited on the host), then,
//   under the lock, checks that every chunk is on the device and marks it
//   `pinned`. A pinned chunk is never an eviction victim (VictimPicker) nor
//   released as freed memory (FreedChunks); it still counts against the
//   device budget like any resident chunk. Counts are kept per chunk
//   (pin_counts_), since small blocks share a slab chunk and a block may be
//   pinned more than once. Another thread may evict the block between the
//   residency call and the lock; PinBlock then tries again, a few times,
//   before it answers CUDA_ERROR_OUT_OF_MEMORY (the device cannot hold the
//   block beside everything else pinned or in use).
#include "shim/core/shim_core.h"

namespace memvirt::shim {

namespace {
constexpr int kPinAttempts = 4;
}  // namespace

CUresult ShimCore::PinBlock(CUdeviceptr ptr, PinnedBlock* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t bytes = 0;
  {
    MutexLock lock(&mu_);
    AllocationFacts facts;
    if (!FactsOf(ptr, &facts) || facts.base != ptr) return CUDA_ERROR_INVALID_VALUE;
    bytes = facts.bytes;
  }
  const MemRange range{ptr, bytes};
  for (int attempt = 0; attempt < kPinAttempts; ++attempt) {
    Ticket ticket;
    const CUresult r = BeforeAccess(&range, 1, nullptr, false, /*synchronous=*/true, &ticket);
    ticket.Close();
    if (r != CUDA_SUCCESS) return r;
    MutexLock lock(&mu_);
    AllocationFacts facts;
    if (!FactsOf(ptr, &facts) || facts.base != ptr) return CUDA_ERROR_INVALID_VALUE;  // freed
    const uint32_t first = table_.IndexOf(ptr);
    const uint32_t last = table_.IndexOf(ptr + bytes - 1);
    bool resident = true;
    for (uint32_t c = first; c <= last && resident; ++c) {
      const ChunkEntry& e = table_[c];
      resident = e.residence == Residence::kDevice && !e.evicting;
    }
    if (!resident) continue;  // evicted by another thread meanwhile
    out->chunk_base = table_.AddressOf(first);
    out->offset = ptr - out->chunk_base;
    out->bytes = bytes;
    out->chunks.clear();
    for (uint32_t c = first; c <= last; ++c) {
      ChunkEntry& e = table_[c];
      e.pinned = true;
      ++pin_counts_[c];
      out->chunks.push_back(pool_->device_handle(e.phys));
    }
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

void ShimCore::UnpinBlock(const PinnedBlock& pinned) {
  MutexLock lock(&mu_);
  const uint32_t first = table_.IndexOf(pinned.chunk_base);
  for (uint32_t c = first; c < first + pinned.chunks.size(); ++c) {
    auto it = pin_counts_.find(c);
    if (it == pin_counts_.end()) continue;  // not pinned: nothing to undo
    if (--it->second == 0) {
      pin_counts_.erase(it);
      table_[c].pinned = false;
    }
  }
}

}  // namespace memvirt::shim

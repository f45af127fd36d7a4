#include "shim/core/chunk_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <type_traits>
#include <utility>

namespace memvirt::shim {

static_assert(std::is_trivially_destructible_v<ChunkEntry>,
              "entries are dropped with their mapping, never destroyed one by one");

ChunkTable::ChunkTable(CUdeviceptr base, uint32_t capacity) : base_(base) {
  if (capacity == 0) return;
  void* p = mmap(nullptr, static_cast<size_t>(capacity) * sizeof(ChunkEntry),
                 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  entries_ = static_cast<ChunkEntry*>(p);
  capacity_ = capacity;
}

ChunkTable::~ChunkTable() { Release(); }

ChunkTable::ChunkTable(ChunkTable&& other) noexcept
    : base_(other.base_),
      capacity_(std::exchange(other.capacity_, 0)),
      size_(std::exchange(other.size_, 0)),
      bytes_(std::exchange(other.bytes_, 0)),
      entries_(std::exchange(other.entries_, nullptr)),
      unmapped_(std::exchange(other.unmapped_, 0)) {}

ChunkTable& ChunkTable::operator=(ChunkTable&& other) noexcept {
  if (this != &other) {
    Release();
    base_ = other.base_;
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
    entries_ = std::exchange(other.entries_, nullptr);
    unmapped_ = std::exchange(other.unmapped_, 0);
  }
  return *this;
}

void ChunkTable::Release() {
  if (entries_ != nullptr) munmap(entries_, static_cast<size_t>(capacity_) * sizeof(ChunkEntry));
  entries_ = nullptr;
  capacity_ = size_ = 0;
  bytes_ = 0;
}

void ChunkTable::Materialize(uint32_t end) {
  if (end <= size_) return;
  const uint64_t stepped =
      (static_cast<uint64_t>(end) + kMaterializeStep - 1) / kMaterializeStep * kMaterializeStep;
  const uint32_t to = static_cast<uint32_t>(std::min<uint64_t>(stepped, capacity_));
  for (uint32_t i = size_; i < to; ++i) new (&entries_[i]) ChunkEntry();
  size_ = to;
  bytes_ = static_cast<uint64_t>(to) << kChunkShift;
}

}  // namespace memvirt::shim

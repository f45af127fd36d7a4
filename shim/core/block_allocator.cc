#include "shim/core/block_allocator.h"

#include <algorithm>
#include <array>
#include <functional>

namespace memvirt::shim {
namespace {

struct ClassTable {
  std::vector<uint64_t> sizes;
  ClassTable() {
    for (uint64_t s = 256; s <= 1024; s += 256) sizes.push_back(s);
    for (uint64_t base = 1024; base < BlockAllocator::kSmallMax; base *= 2) {
      for (int step = 1; step <= 4; ++step) sizes.push_back(base + base / 4 * step);
    }
  }
};

const ClassTable& Classes() {
  static const ClassTable table;
  return table;
}

}  // namespace

int BlockAllocator::NumClasses() { return static_cast<int>(Classes().sizes.size()); }

uint64_t BlockAllocator::ClassBytes(int size_class) { return Classes().sizes[size_class]; }

int BlockAllocator::ClassOf(uint64_t bytes) {
  if (bytes > kSmallMax) return -1;
  const auto& sizes = Classes().sizes;
  return static_cast<int>(std::lower_bound(sizes.begin(), sizes.end(), bytes) - sizes.begin());
}

BlockAllocator::BlockAllocator(ChunkTable* table, uint32_t max_committed_chunks)
    : table_(table),
      max_committed_(max_committed_chunks),
      range_cache_(kCacheMaxChunks + 1),
      class_free_(NumClasses()),
      class_current_slab_(NumClasses(), kNoIndex) {
  for (auto& c : range_cache_) c.reserve(kCachePerCount);
  if (table_->capacity() > 0) {
    free_by_start_[0] = table_->capacity();
    free_by_size_.insert({table_->capacity(), 0});
  }
}

BlockAllocator::~BlockAllocator() {
  if (const uint64_t over = OverflowOf(committed_); over != 0) overflow_->Release(over);
}

void BlockAllocator::ShareOverflow(OverflowLedger* ledger, uint32_t own_chunks) {
  overflow_ = ledger;
  own_chunks_ = own_chunks;
}

bool BlockAllocator::TryCommit(uint32_t count) {
  const uint64_t after = committed_ + static_cast<uint64_t>(count);
  if (after > max_committed_) return false;
  const uint64_t over = OverflowOf(after) - OverflowOf(committed_);
  if (over != 0 && !overflow_->TryCharge(over)) return false;
  committed_ = static_cast<uint32_t>(after);
  return true;
}

void BlockAllocator::Uncommitted(uint32_t count) {
  const uint64_t over = OverflowOf(committed_) - OverflowOf(committed_ - count);
  committed_ -= count;
  if (over != 0) overflow_->Release(over);
}

uint64_t BlockAllocator::admissible_chunks() const {
  const uint64_t room = max_committed_ - committed_;
  if (overflow_ == nullptr) return room;
  const uint64_t own_left = own_chunks_ > committed_ ? own_chunks_ - committed_ : 0;
  return std::min(room, own_left + overflow_->available());
}

void BlockAllocator::FlushRangeCache() {
  if (cached_ranges_ == 0) return;
  for (uint32_t count = 1; count <= kCacheMaxChunks; ++count) {
    for (uint32_t start : range_cache_[count]) InsertFreeRange(start, count);
    range_cache_[count].clear();
  }
  cached_ranges_ = 0;
}

bool BlockAllocator::AllocateRange(uint32_t count, uint32_t* first) {
  if (count == 0 || committed_ + static_cast<uint64_t>(count) > max_committed_) return false;
  if (count <= kCacheMaxChunks && !range_cache_[count].empty()) {
    if (!TryCommit(count)) return false;
    std::vector<uint32_t>& cached = range_cache_[count];  // Note [repeatable placement]
    auto lowest = std::min_element(cached.begin(), cached.end());
    *first = *lowest;  // Note [range cache]
    *lowest = cached.back();
    cached.pop_back();
    --cached_ranges_;
    return true;
  }
  FlushRangeCache();
  auto it = free_by_size_.lower_bound({count, 0});
  if (it == free_by_size_.end() || !TryCommit(count)) return false;
  uint32_t len = it->first, start = it->second;
  free_by_size_.erase(it);
  free_by_start_.erase(start);
  if (len > count) {
    free_by_start_[start + count] = len - count;
    free_by_size_.insert({len - count, start + count});
  }
  table_->Materialize(start + count);  // Note [sparse chunk table]
  *first = start;
  return true;
}

void BlockAllocator::FreeRange(uint32_t first, uint32_t count) {
  Uncommitted(count);
  if (count <= kCacheMaxChunks) {
    std::vector<uint32_t>& cached = range_cache_[count];
    if (cached.size() < kCachePerCount) {
      cached.push_back(first);
      ++cached_ranges_;
      return;
    }
    // Full: it keeps the lowest ranges, whatever the order of the frees
    // (Note [repeatable placement]).
    auto highest = std::max_element(cached.begin(), cached.end());
    if (*highest > first) std::swap(*highest, first);
  }
  InsertFreeRange(first, count);
}

void BlockAllocator::InsertFreeRange(uint32_t first, uint32_t count) {
  uint32_t start = first, len = count;
  auto next = free_by_start_.lower_bound(first);
  if (next != free_by_start_.end() && next->first == first + count) {
    len += next->second;
    free_by_size_.erase({next->second, next->first});
    next = free_by_start_.erase(next);
  }
  if (next != free_by_start_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      start = prev->first;
      len += prev->second;
      free_by_size_.erase({prev->second, prev->first});
      free_by_start_.erase(prev);
    }
  }
  free_by_start_[start] = len;
  free_by_size_.insert({len, start});
}

bool BlockAllocator::AllocateSmall(int size_class, uint64_t* offset, Allocation* out) {
  auto& free_list = class_free_[size_class];
  const uint64_t size = ClassBytes(size_class);
  if (free_list.empty()) {
    uint32_t slab_index = class_current_slab_[size_class];
    const uint32_t per_slab = static_cast<uint32_t>(kChunkBytes / size);
    if (slab_index == kNoIndex || slabs_[slab_index].bump == per_slab) {
      uint32_t chunk;
      if (!AllocateRange(1, &chunk)) return false;
      slab_index = static_cast<uint32_t>(slabs_.size());
      Slab slab;
      slab.chunk = chunk;
      slab.size_class = static_cast<uint8_t>(size_class);
      slab.live_bits.assign((per_slab + 63) / 64, 0);
      slabs_.push_back(std::move(slab));
      class_current_slab_[size_class] = slab_index;
      ChunkEntry& e = (*table_)[chunk];
      e.kind = ChunkKind::kSlab;
      e.size_class = static_cast<uint8_t>(size_class);
      e.owner_first = chunk;
      e.owner_count = 1;
      e.slab = slab_index;
      out->new_first = chunk;
      out->new_count = 1;
    }
    Slab& slab = slabs_[slab_index];
    free_list.push_back((static_cast<uint64_t>(slab.chunk) << kChunkShift) + slab.bump * size);
    ++slab.bump;
  }
  // A min-heap of offsets: the lowest free object (Note [repeatable placement]).
  std::pop_heap(free_list.begin(), free_list.end(), std::greater<uint64_t>());
  *offset = free_list.back();
  free_list.pop_back();
  const ChunkEntry& e = (*table_)[static_cast<uint32_t>(*offset >> kChunkShift)];
  Slab& slab = slabs_[e.slab];
  const uint64_t object = (*offset & (kChunkBytes - 1)) / size;
  slab.live_bits[object / 64] |= 1ull << (object % 64);
  ++slab.live;
  live_bytes_ += size;
  return true;
}

bool BlockAllocator::Allocate(uint64_t bytes, Allocation* out) {
  *out = Allocation();
  const int size_class = ClassOf(bytes);
  if (size_class >= 0) return AllocateSmall(size_class, &out->offset, out);
  const uint64_t chunks64 = ChunksFor(bytes);
  if (chunks64 > table_->capacity()) return false;
  const uint32_t count = static_cast<uint32_t>(chunks64);
  uint32_t first;
  if (!AllocateRange(count, &first)) return false;
  for (uint32_t i = 0; i < count; ++i) {
    ChunkEntry& e = (*table_)[first + i];
    e.kind = ChunkKind::kLarge;
    e.owner_first = first;
    e.owner_count = count;
    e.block_bytes = i == 0 ? bytes : 0;
  }
  live_bytes_ += static_cast<uint64_t>(count) << kChunkShift;
  out->offset = static_cast<uint64_t>(first) << kChunkShift;
  out->new_first = first;
  out->new_count = count;
  return true;
}

bool BlockAllocator::Free(uint64_t offset, Release* out) {
  *out = Release();
  if (offset >= table_->bytes()) return false;
  const uint32_t chunk = static_cast<uint32_t>(offset >> kChunkShift);
  ChunkEntry& e = (*table_)[chunk];
  if (e.kind == ChunkKind::kLarge) {
    if (e.owner_first != chunk || (offset & (kChunkBytes - 1)) != 0) return false;
    const uint32_t count = e.owner_count;
    out->bytes = e.block_bytes;
    Disown(chunk, count, ChunkKind::kFree);
    FreeRange(chunk, count);
    out->freed_first = chunk;
    out->freed_count = count;
    return true;
  }
  if (e.kind != ChunkKind::kSlab) return false;
  Slab& slab = slabs_[e.slab];
  const uint64_t size = ClassBytes(slab.size_class);
  const uint64_t in_chunk = offset & (kChunkBytes - 1);
  if (in_chunk % size != 0) return false;
  const uint64_t object = in_chunk / size;
  if (object >= slab.bump) return false;
  uint64_t& word = slab.live_bits[object / 64];
  const uint64_t bit = 1ull << (object % 64);
  if ((word & bit) == 0) return false;
  word &= ~bit;
  --slab.live;
  live_bytes_ -= size;
  std::vector<uint64_t>& free_list = class_free_[slab.size_class];
  free_list.push_back(offset);
  std::push_heap(free_list.begin(), free_list.end(), std::greater<uint64_t>());
  out->bytes = size;
  return true;
}

bool BlockAllocator::Reserve(uint32_t count, uint64_t alignment, uint32_t* first) {
  FlushRangeCache();
  const uint64_t align_chunks = std::max<uint64_t>(alignment >> kChunkShift, 1);
  const uint64_t want = count + align_chunks - 1;  // room for any misalignment
  if (want > table_->capacity()) return false;
  auto it = free_by_size_.lower_bound({static_cast<uint32_t>(want), 0});
  if (it == free_by_size_.end()) return false;
  const uint32_t len = it->first, start = it->second;
  free_by_size_.erase(it);
  free_by_start_.erase(start);
  const uint64_t address = table_->AddressOf(start);
  const uint64_t aligned = (address + alignment - 1) / alignment * alignment;
  const uint32_t at = start + static_cast<uint32_t>((aligned - address) >> kChunkShift);
  if (at > start) InsertFreeRange(start, at - start);
  if (at + count < start + len) InsertFreeRange(at + count, start + len - (at + count));
  table_->Materialize(at + count);  // Note [sparse chunk table]
  for (uint32_t c = at; c < at + count; ++c) (*table_)[c].kind = ChunkKind::kReserved;
  *first = at;
  return true;
}

void BlockAllocator::Unreserve(uint32_t first, uint32_t count) {
  for (uint32_t c = first; c < first + count; ++c) (*table_)[c].kind = ChunkKind::kFree;
  InsertFreeRange(first, count);
}

void BlockAllocator::MapReserved(uint32_t first, uint32_t count) {
  for (uint32_t c = first; c < first + count; ++c) (*table_)[c].kind = ChunkKind::kLarge;
  Regroup(first, count);
  live_bytes_ += static_cast<uint64_t>(count) << kChunkShift;
}

void BlockAllocator::Regroup(uint32_t first, uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    ChunkEntry& e = (*table_)[first + i];
    e.owner_first = first;
    e.owner_count = count;
    e.block_bytes = i == 0 ? static_cast<uint64_t>(count) << kChunkShift : 0;
  }
}

void BlockAllocator::UnmapToReserved(uint32_t first, uint32_t count) {
  Disown(first, count, ChunkKind::kReserved);
}

void BlockAllocator::Disown(uint32_t first, uint32_t count, ChunkKind kind) {
  for (uint32_t i = 0; i < count; ++i) {
    ChunkEntry& e = (*table_)[first + i];
    e.kind = kind;
    e.owner_first = kNoIndex;
    e.owner_count = 0;
    e.block_bytes = 0;
  }
  live_bytes_ -= static_cast<uint64_t>(count) << kChunkShift;
}

bool BlockAllocator::Commit(uint32_t count) { return TryCommit(count); }

bool BlockAllocator::Lookup(uint64_t offset, uint64_t* block_offset, uint64_t* block_bytes) const {
  if (offset >= table_->bytes()) return false;
  const uint32_t chunk = static_cast<uint32_t>(offset >> kChunkShift);
  const ChunkEntry& e = (*table_)[chunk];
  if (e.kind == ChunkKind::kLarge) {
    const ChunkEntry& head = (*table_)[e.owner_first];
    *block_offset = static_cast<uint64_t>(e.owner_first) << kChunkShift;
    *block_bytes = head.block_bytes;
    return offset < *block_offset + head.block_bytes;
  }
  if (e.kind != ChunkKind::kSlab) return false;
  const Slab& slab = slabs_[e.slab];
  const uint64_t size = ClassBytes(slab.size_class);
  const uint64_t object = (offset & (kChunkBytes - 1)) / size;
  if (object >= slab.bump || (slab.live_bits[object / 64] & (1ull << (object % 64))) == 0) {
    return false;
  }
  *block_offset = (static_cast<uint64_t>(chunk) << kChunkShift) + object * size;
  *block_bytes = size;
  return true;
}

}  // namespace memvirt::shim

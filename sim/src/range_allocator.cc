#include "range_allocator.h"

#include <iterator>

namespace memsim {

RangeAllocator::RangeAllocator(uint64_t base, uint64_t size) : free_bytes_(size) {
  if (size > 0) free_.emplace(base, size);
}

bool RangeAllocator::TakeExact(uint64_t start, uint64_t size) {
  auto it = free_.upper_bound(start);
  if (it == free_.begin()) return false;
  --it;
  const uint64_t block_start = it->first;
  const uint64_t block_end = it->first + it->second;
  if (start < block_start || start + size > block_end || start + size < start) return false;
  free_.erase(it);
  if (start > block_start) free_.emplace(block_start, start - block_start);
  if (start + size < block_end) free_.emplace(start + size, block_end - (start + size));
  free_bytes_ -= size;
  return true;
}

std::optional<uint64_t> RangeAllocator::Allocate(uint64_t size, uint64_t alignment, uint64_t hint) {
  if (size == 0) return std::nullopt;
  if (alignment == 0) alignment = 1;
  if (hint != 0 && hint % alignment == 0 && TakeExact(hint, size)) return hint;
  for (const auto& [start, len] : free_) {
    const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned < start) continue;  // overflow
    if (aligned - start + size <= len) {
      TakeExact(aligned, size);
      return aligned;
    }
  }
  return std::nullopt;
}

void RangeAllocator::Free(uint64_t start, uint64_t size) {
  if (size == 0) return;
  uint64_t new_start = start;
  uint64_t new_size = size;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      new_start = prev->first;
      new_size += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && start + size == next->first) {
    new_size += next->second;
    free_.erase(next);
  }
  free_.emplace(new_start, new_size);
  free_bytes_ += size;
}

}  // namespace memsim

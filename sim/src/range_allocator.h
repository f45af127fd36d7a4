// First-fit allocator of address ranges inside [base, base + size).
//
// Thread safety: not thread-safe; the owner (AddressSpace) serializes calls.
#ifndef MEMSIM_SRC_RANGE_ALLOCATOR_H_
#define MEMSIM_SRC_RANGE_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <optional>

namespace memsim {

class RangeAllocator {
 public:
  RangeAllocator(uint64_t base, uint64_t size);

  // Returns the start of a free range of `size` bytes aligned to `alignment` (a power of two),
  // preferring `hint` when [hint, hint + size) is free. nullopt when nothing fits.
  // REQUIRES: size > 0.
  std::optional<uint64_t> Allocate(uint64_t size, uint64_t alignment, uint64_t hint = 0);

  // Returns [start, start + size) to the free pool. REQUIRES: it was allocated and not freed.
  void Free(uint64_t start, uint64_t size);

  uint64_t free_bytes() const { return free_bytes_; }

 private:
  bool TakeExact(uint64_t start, uint64_t size);

  std::map<uint64_t, uint64_t> free_;  // start -> size, non-adjacent
  uint64_t free_bytes_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_RANGE_ALLOCATOR_H_

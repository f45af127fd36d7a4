// Hands out device addresses inside the VA reservation: size classes for
// small blocks, chunk-aligned ranges for large ones. It only does address
// arithmetic and bookkeeping in the ChunkTable; it never calls the driver.
//
// Thread safety: not thread-safe; ShimCore serializes calls.
//
// Note [size classes]
//   Blocks up to kSmallMax bytes come from 2 MiB slab chunks of one class
//   each (256 B steps up to 1 KiB, then four classes per power of two), so a
//   warm alloc/free pair is a heap pop/push plus a bitmap update. A slab
//   chunk never straddles two blocks, so residency of a small block is the
//   residency of its one chunk. Slabs are kept once created (their chunks
//   stay committed) which bounds fragmentation work at the cost of holding
//   the high-water mark of small allocations.
//
// Note [large blocks]
//   Larger blocks are rounded up to whole chunks and placed best-fit in a
//   free-range map (coalescing on free), so every chunk of a large block
//   belongs to that block alone and can be paged independently of others.
//
// Note [range cache]
//   Programs free and re-allocate large blocks of the same sizes every
//   iteration. A freed range of up to kCacheMaxChunks chunks is therefore
//   kept in a per-count cache (up to kCachePerCount ranges each) instead of
//   being merged into the free-range map; an allocation of that count pops
//   the lowest of them, which costs no map operation and no heap allocation.
//   On a miss the cache is flushed into the map first, so best fit and
//   coalescing see every free range exactly as without the cache.
//
// Note [repeatable placement]
//   A free small object and a cached range are taken lowest address first
//   (a min-heap per class, a scan of at most kCachePerCount ranges), never
//   last freed first, and a full range cache keeps the lowest ranges freed
//   into it. A training iteration allocates the same sizes in the
//   same order each time but frees them in another order; with every choice
//   a function of the free set, not of the order of the frees, the iteration
//   finds the free set it started from and places every block where the
//   previous iteration did. The chunk sets of its launches then repeat, which
//   is what lets a policy that learns the iteration (lifetime) recognize it:
//   with last-freed-first lists the shim handed out each iteration's
//   activations permuted, and lifetime paged like lru (docs/policy.md,
//   calibration). Cost: O(log n) per small alloc and free for n free objects
//   of the class, instead of O(1).
#ifndef MEMVIRT_SHIM_CORE_BLOCK_ALLOCATOR_H_
#define MEMVIRT_SHIM_CORE_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "shim/core/chunk_table.h"
#include "shim/core/overflow_ledger.h"

namespace memvirt::shim {

class BlockAllocator {
 public:
  static constexpr uint64_t kSmallMax = 1ull << 20;
  static constexpr uint64_t kMinAlign = 256;

  // `table` must outlive the allocator. At most `max_committed_chunks` chunks
  // are owned by live blocks or slabs at any time (the virtual capacity).
  BlockAllocator(ChunkTable* table, uint32_t max_committed_chunks);
  // Gives back what ShareOverflow() charged.
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // Commits chunks beyond the first `own_chunks` (the core's device budget)
  // only as `ledger` admits them: charged when committed, released when
  // freed (Note [shared admission] in overflow_ledger.h). `ledger` is not
  // owned and outlives the allocator. REQUIRES: nothing committed yet.
  void ShareOverflow(OverflowLedger* ledger, uint32_t own_chunks);

  struct Allocation {
    uint64_t offset = 0;            // from the reservation base
    uint32_t new_first = kNoIndex;  // chunks newly committed by this call
    uint32_t new_count = 0;
  };
  // Returns false if the request cannot be met within the capacity (and the
  // shared overflow ledger's) or VA.
  // REQUIRES: bytes > 0.
  bool Allocate(uint64_t bytes, Allocation* out);

  struct Release {
    uint64_t bytes = 0;               // usable bytes of the freed block
    uint32_t freed_first = kNoIndex;  // chunks no longer owned by any block
    uint32_t freed_count = 0;
  };
  // Frees the block starting at `offset`. Returns false if `offset` is not the
  // start of a live block (the caller reports CUDA_ERROR_INVALID_VALUE).
  bool Free(uint64_t offset, Release* out);

  // For any address inside a live block: its start offset and usable size.
  bool Lookup(uint64_t offset, uint64_t* block_offset, uint64_t* block_bytes) const;

  // ---- Application VMM (Note [application VMM] in shim_core_app_vmm.cc) ----
  // Takes `count` chunks whose first address is a multiple of `alignment`
  // bytes out of the free ranges, as kReserved chunks; commits nothing.
  // False if no free range can hold them. REQUIRES: count > 0, alignment a
  // power of two.
  bool Reserve(uint32_t count, uint64_t alignment, uint32_t* first);
  // Gives a reserved range back. REQUIRES: every chunk of it kReserved.
  void Unreserve(uint32_t first, uint32_t count);
  // Makes kReserved [first, first + count) one live kLarge block (its
  // capacity is committed separately, with Commit()). REQUIRES: every chunk
  // of it kReserved.
  void MapReserved(uint32_t first, uint32_t count);
  // Turns [first, first + count), part of a block made by MapReserved()
  // and Regroup(), back into kReserved chunks; the rest of that block is
  // left for the caller to Regroup().
  void UnmapToReserved(uint32_t first, uint32_t count);
  // Makes the kLarge chunks [first, first + count) one block (adjacent
  // mappings of application VMM form one contiguous allocation).
  void Regroup(uint32_t first, uint32_t count);
  // Capacity held without a block (a virtual handle's): false if it would
  // exceed max_committed_chunks() or the shared overflow ledger.
  bool Commit(uint32_t count);
  // REQUIRES: `count` chunks committed by Commit() and not given back yet.
  void Uncommit(uint32_t count) { Uncommitted(count); }

  uint32_t committed_chunks() const { return committed_; }
  uint32_t max_committed_chunks() const { return max_committed_; }
  // The most chunks the next commit may take: within max_committed_chunks()
  // and what the overflow ledger admits now.
  uint64_t admissible_chunks() const;
  uint64_t live_bytes() const { return live_bytes_; }

  static int ClassOf(uint64_t bytes);  // -1 if larger than kSmallMax
  static uint64_t ClassBytes(int size_class);
  static int NumClasses();

 private:
  struct Slab {
    uint32_t chunk = kNoIndex;
    uint8_t size_class = 0;
    uint32_t bump = 0;  // objects carved so far
    uint32_t live = 0;
    std::vector<uint64_t> live_bits;
  };

  static constexpr uint32_t kCacheMaxChunks = 64;
  static constexpr size_t kCachePerCount = 4;

  bool AllocateRange(uint32_t count, uint32_t* first);
  // Chunks of `committed` beyond own_chunks_ (0 without a ledger).
  uint64_t OverflowOf(uint64_t committed) const {
    return overflow_ != nullptr && committed > own_chunks_ ? committed - own_chunks_ : 0;
  }
  // Commits `count` more chunks if the capacity and the overflow ledger
  // admit them; false (nothing changed) otherwise.
  bool TryCommit(uint32_t count);
  // Gives `count` committed chunks back (and their overflow charge).
  void Uncommitted(uint32_t count);
  void FreeRange(uint32_t first, uint32_t count);
  void InsertFreeRange(uint32_t first, uint32_t count);  // map only, no accounting
  void FlushRangeCache();
  bool AllocateSmall(int size_class, uint64_t* offset, Allocation* out);
  // The kLarge chunks [first, first + count) leave their block as `kind`.
  void Disown(uint32_t first, uint32_t count, ChunkKind kind);

  ChunkTable* table_;
  uint32_t max_committed_;
  uint32_t committed_ = 0;
  OverflowLedger* overflow_ = nullptr;  // Note [shared admission]; null: none
  uint32_t own_chunks_ = 0;
  uint64_t live_bytes_ = 0;
  std::map<uint32_t, uint32_t> free_by_start_;            // start -> count
  std::set<std::pair<uint32_t, uint32_t>> free_by_size_;  // (count, start)
  std::vector<std::vector<uint32_t>> range_cache_;        // per chunk count: free range starts
  uint32_t cached_ranges_ = 0;
  std::vector<Slab> slabs_;
  std::vector<std::vector<uint64_t>> class_free_;  // per class: min-heap of free offsets
  std::vector<uint32_t> class_current_slab_;       // per class: slab being carved
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_BLOCK_ALLOCATOR_H_

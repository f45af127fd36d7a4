// The chunk table: one entry per 2 MiB slot of the shim's VA reservation.
//
// Indexing is O(1): chunk = (ptr - base) >> 21. Host memory is spent only on
// the entries of the address range in use (Note [sparse chunk table]). The allocator writes the
// ownership fields (which block a chunk belongs to); the residency manager
// writes the backing fields (where the chunk's bytes live now).
//
// Thread safety: not thread-safe; the owner (ShimCore) guards every access
// with its mutex.
#ifndef MEMVIRT_SHIM_CORE_CHUNK_TABLE_H_
#define MEMVIRT_SHIM_CORE_CHUNK_TABLE_H_

#include <cuda.h>

#include <cstdint>

#include "shim/core/config.h"

namespace memvirt::shim {

inline constexpr uint32_t kNoIndex = 0xffffffffu;

enum class ChunkKind : uint8_t {
  kFree = 0,   // not part of any live block
  kLarge = 1,  // part of a chunk-aligned block of owner_count chunks
  kSlab = 2,   // holds small objects of one size class
  // Note [application VMM] (shim_core_app_vmm.cc): part of an address range
  // the application reserved (cuMemAddressReserve served from the
  // reservation) with nothing of its own mapped there. A virtual handle
  // mapped there makes the chunks a kLarge block (app_mapped).
  kReserved = 3,
  // Part of such a range with a driver handle the shim does not page mapped
  // there by the application: the driver's memory, never touched by the core.
  kForeign = 4,
};

// True for chunks of live blocks (cuMemAlloc blocks, slabs, mapped
// application VMM): what the residency machinery pages.
inline bool OwnedKind(ChunkKind kind) {
  return kind == ChunkKind::kLarge || kind == ChunkKind::kSlab;
}

enum class Residence : uint8_t {
  kUnbacked = 0,  // no physical memory mapped at the chunk's VA
  kDevice = 1,    // device physical chunk `phys` mapped
  kHost = 2,      // host (HOST_NUMA) physical slot `phys` mapped: see Note [host mapping]
  kNvme = 3,      // nothing mapped; the bytes are in the spill tier (Note [spill tier])
};

// Last use of a chunk by one tracked stream: (stream index, sequence number).
struct StreamUse {
  uint32_t stream = kNoIndex;
  uint64_t seq = 0;
};

inline constexpr int kMaxUses = 4;

struct ChunkEntry {
  // Ownership (allocator).
  ChunkKind kind = ChunkKind::kFree;
  uint8_t size_class = 0;  // kSlab: size class index
  uint32_t owner_first =
      kNoIndex;              // kLarge: first chunk of the block; kSlab: self; kFree: kNoIndex
  uint32_t owner_count = 0;  // kLarge: chunks in the block; kSlab: 1
  uint32_t slab = kNoIndex;  // kSlab: index of the allocator's slab record
  uint64_t block_bytes = 0;  // kLarge, at owner_first only: requested bytes

  // Backing (residency manager).
  Residence residence = Residence::kUnbacked;
  bool live_data = false;     // contents may still be read (false once freed)
  bool use_overflow = false;  // more streams touched it than uses[] holds
  bool dead_listed = false;   // in ShimCore's list of freed chunks still backed
  bool evicting = false;      // page-out copy in flight (Note [pipelined page-out])
  // kHost only: the bytes are in slot `phys` but nothing is mapped at the
  // chunk's address (a remap failed; Note [failed transitions] in
  // shim_core.h). The next access maps it again before anything else.
  // Written only through ChunkTable::SetUnmapped (which counts the marks).
  bool unmapped = false;
  // Device addresses were written into it (a pointer array, by a copy from
  // the host or from another such chunk, or by a kernel that read one):
  // kernels that read it are fenced (Note [hidden reach] in
  // shim_core_hidden_reach.cc). Cleared when the chunk is freed.
  bool holds_addresses = false;
  // The address of its block was found in memory (a pointer array, a module
  // variable): a kernel may reach it without naming it, so it is never
  // demoted to the spill tier. Cleared when the chunk is freed.
  bool hidden_target = false;
  uint8_t num_uses = 0;
  // kDevice only: held on the device for an export (ShimCore::PinBlock,
  // Note [pinned blocks] in shim_core_pin.cc): never a victim.
  bool pinned = false;
  // kDevice only: chosen as a victim by the eviction being decided
  // (VictimPicker::PickIdle); false between its calls.
  bool picked = false;
  // kLarge only: the block is application VMM memory (a virtual handle mapped
  // by cuMemMap, Note [application VMM]), not a cuMemAlloc block.
  bool app_mapped = false;
  uint32_t phys = kNoIndex;  // device handle index or host slot index
  uint64_t fill_seq = 0;     // copy-stream sequence of the last page-in (0: none)
  // The id of the last operation that touched or reached it (Note [touch
  // set] in touch_set.h): its recency, and "in use by the operation being
  // prepared" when equal to the current id.
  uint64_t stamp = 0;
  StreamUse uses[kMaxUses];
};

// Note [sparse chunk table]
//   The reservation is sized for the application's largest plausible use
//   (PyTorch's expandable segments reserve 1.125 x the device's memory per
//   pool), far beyond what a process ever touches, so the table must not cost
//   host memory in proportion to it. Its entries live in one anonymous
//   MAP_NORESERVE mapping of the whole capacity (addresses stay stable, so
//   references into the table survive growth); only a prefix is constructed
//   ("materialized"), in steps of kMaterializeStep entries, as the allocator
//   hands out chunks beyond it. Pages of the mapping past the prefix are
//   never touched and cost nothing. The allocator places blocks best-fit
//   from the low end, so the prefix follows the address-space high-water
//   mark. Contains() answers for the prefix only: an address past it belongs
//   to no block, exactly as a free chunk inside it.
class ChunkTable {
 public:
  static constexpr uint32_t kMaterializeStep = 512;  // 1 GiB of address space

  ChunkTable() = default;
  // Maps room for `capacity` entries and materializes none. On failure
  // capacity() is 0 (the caller reports it).
  ChunkTable(CUdeviceptr base, uint32_t capacity);
  ~ChunkTable();
  ChunkTable(ChunkTable&& other) noexcept;
  ChunkTable& operator=(ChunkTable&& other) noexcept;
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;

  CUdeviceptr base() const { return base_; }
  // Chunks of the reservation.
  uint32_t capacity() const { return capacity_; }
  // Entries materialized: every index below is valid, none above.
  uint32_t size() const { return size_; }
  // Bytes of address space the materialized entries cover.
  uint64_t bytes() const { return bytes_; }

  // Materializes entries up to at least `end` (default-constructed).
  // REQUIRES: end <= capacity().
  void Materialize(uint32_t end);

  // The one subtract-and-compare of the argument scan.
  bool Contains(uint64_t ptr) const { return ptr - base_ < bytes_; }
  uint32_t IndexOf(uint64_t ptr) const {
    return static_cast<uint32_t>((ptr - base_) >> kChunkShift);
  }
  CUdeviceptr AddressOf(uint32_t index) const {
    return base_ + (static_cast<uint64_t>(index) << kChunkShift);
  }

  // REQUIRES: index < size().
  ChunkEntry& operator[](uint32_t index) { return entries_[index]; }
  const ChunkEntry& operator[](uint32_t index) const { return entries_[index]; }
  ChunkEntry* data() { return entries_; }

  // Sets the `unmapped` mark of `chunk` and keeps unmapped_count() in step.
  // REQUIRES: chunk < size().
  void SetUnmapped(uint32_t chunk, bool unmapped) {
    ChunkEntry& e = entries_[chunk];
    if (e.unmapped == unmapped) return;
    e.unmapped = unmapped;
    if (unmapped) {
      ++unmapped_;
    } else {
      --unmapped_;
    }
  }
  // Chunks marked `unmapped`.
  uint32_t unmapped_count() const { return unmapped_; }

 private:
  void Release();

  CUdeviceptr base_ = 0;
  uint32_t capacity_ = 0;
  uint32_t size_ = 0;
  uint64_t bytes_ = 0;
  ChunkEntry* entries_ = nullptr;  // owned mapping of capacity_ entries
  uint32_t unmapped_ = 0;          // entries marked `unmapped`
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CHUNK_TABLE_H_

// AppVmmBook: the records of the application's own VMM objects in one core
// (Note [application VMM] in shim_core_app_vmm.cc): the virtual handles its
// cuMemCreate calls got, the ranges its cuMemAddressReserve calls reserved in
// the core's reservation, and its cuMemMap mappings of virtual handles there.
// Ranges are in chunk indices of the core's chunk table. Bookkeeping only: it
// never calls the driver and never reads or writes chunk state; the core does
// both and keeps these records in step.
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex (its member is guarded by it). Pointers it returns stay
// valid until the record is erased.
#ifndef MEMVIRT_SHIM_CORE_APP_VMM_BOOK_H_
#define MEMVIRT_SHIM_CORE_APP_VMM_BOOK_H_

#include <cuda.h>

#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memvirt::shim {

// A virtual handle: what cuMemCreate returned for memory the core pages.
struct VirtualHandle {
  CUmemAllocationProp prop{};
  uint32_t chunks = 0;
  uint32_t refs = 1;    // cuMemCreate and cuMemRetainAllocationHandle, less cuMemRelease
  uint32_t mapped = 0;  // chunks of it mapped now
  // Per chunk of the handle: 0 never mapped, 1 mapped, 2 unmapped (its
  // bytes were discarded: mapping it again is refused).
  std::vector<uint8_t> state;
  // Once exported (Note [exported handles]): the driver's memory that holds
  // it now; its mappings are the driver's (kForeign).
  CUmemGenericAllocationHandle real = 0;
  // What finishing its export in flight found wrong, for the exporting
  // call's repeat to report (Note [exports in flight]).
  CUresult export_error = CUDA_SUCCESS;
};

// A mapping of part of a virtual handle: `count` chunks from chunk
// `offset_chunks` of `handle`.
struct AppMapping {
  CUmemGenericAllocationHandle handle = 0;
  uint32_t offset_chunks = 0;
  uint32_t count = 0;
};

// Chunks [first, first + count); count 0: none.
struct ChunkSpan {
  uint32_t first = 0;
  uint32_t count = 0;
};

class AppVmmBook {
 public:
  AppVmmBook() = default;
  AppVmmBook(const AppVmmBook&) = delete;
  AppVmmBook& operator=(const AppVmmBook&) = delete;

  // ---- Virtual handles ----
  // Records a new handle of `chunks` chunks (one reference, nothing mapped);
  // its id is `tag` | a sequence number below 2^40. REQUIRES: `tag` has no
  // bit below 40 set.
  CUmemGenericAllocationHandle AddHandle(uint64_t tag, uint32_t chunks,
                                         const CUmemAllocationProp& prop);
  // The record of `handle`, or null; Live(): only while it has references.
  VirtualHandle* Find(CUmemGenericAllocationHandle handle);
  VirtualHandle* Live(CUmemGenericAllocationHandle handle) {
    VirtualHandle* v = Find(handle);
    return v != nullptr && v->refs > 0 ? v : nullptr;
  }
  void EraseHandle(CUmemGenericAllocationHandle handle) { handles_.erase(handle); }

  // ---- Reserved ranges ----
  void AddReservation(ChunkSpan range) { reservations_[range.first] = range.count; }
  // The reservation starting at chunk `first` (count 0: none starts there).
  ChunkSpan ReservationAt(uint32_t first) const;
  // The reservation holding chunk `c` (count 0: none).
  ChunkSpan ReservationOf(uint32_t c) const;
  void EraseReservation(uint32_t first) { reservations_.erase(first); }

  // ---- Mappings ----
  void AddMapping(uint32_t first, const AppMapping& mapping) { mappings_[first] = mapping; }
  // The mapping starting at chunk `first`, or null.
  const AppMapping* MappingAt(uint32_t first) const;
  // The mapping holding chunk `c` (*first: its first chunk), or null.
  const AppMapping* MappingOf(uint32_t c, uint32_t* first) const;
  // Erases the mapping starting at chunk `first` and returns it.
  // REQUIRES: MappingAt(first) != null.
  AppMapping TakeMapping(uint32_t first);
  // (first chunk, mapping) of each mapping of `handle`, in address order.
  std::vector<std::pair<uint32_t, AppMapping>> MappingsOf(
      CUmemGenericAllocationHandle handle) const;

 private:
  uint64_t next_ = 1;
  std::unordered_map<CUmemGenericAllocationHandle, VirtualHandle> handles_;
  std::map<uint32_t, uint32_t> reservations_;  // first chunk -> count
  std::map<uint32_t, AppMapping> mappings_;    // first chunk -> mapping
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_APP_VMM_BOOK_H_

// A physical memory allocation (cuMemCreate): a memfd whose pages back device virtual ranges.
//
// Ownership: shared. The handle table holds one reference per outstanding handle retain
// (cuMemCreate / cuMemRetainAllocationHandle, dropped by cuMemRelease) and every mapping holds
// one, so memory that was released while still mapped lives until its last unmap, as the CUDA
// documentation specifies. Destruction closes the memfd and returns the device capacity.
//
// Thread safety: immutable after construction except handle_refs (atomic) and the parked
// mapping (Park/Unpark, thread-safe: an internal mutex, taken after AddressSpace's).
#ifndef MEMSIM_SRC_PHYSICAL_H_
#define MEMSIM_SRC_PHYSICAL_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "cuda_api.h"
#include "memvirt/common/mutex.h"

namespace memsim {

class CapacityAccount;

class Physical {
 public:
  // Creates a memfd of `size` bytes. `charged_to` (may be null for host-located memory) has
  // already been charged `size` bytes and is released on destruction. nullptr on failure
  // (then nothing was released: the caller still owns the charge).
  static std::shared_ptr<Physical> Create(uint64_t size, const CUmemAllocationProp& prop,
                                          CapacityAccount* charged_to);
  // Wraps an existing file descriptor (cuMemImportFromShareableHandle): takes a duplicate of
  // `fd`, charges nothing (the exporter owns the capacity). The location is recovered from the
  // memfd name the sim gives its allocations; any other shareable file (a memfd or /dev/shm
  // object of another program) is host-located. nullptr if `fd` is not a mappable file whose
  // size is a positive multiple of `granularity`.
  static std::shared_ptr<Physical> Import(int fd, uint64_t granularity);
  ~Physical();
  Physical(const Physical&) = delete;
  Physical& operator=(const Physical&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }
  const CUmemAllocationProp& prop() const { return prop_; }
  bool device_located() const { return prop_.location.type == CU_MEM_LOCATION_TYPE_DEVICE; }
  uint64_t id() const { return id_; }
  CUmemGenericAllocationHandle handle() const {
    return reinterpret_cast<CUmemGenericAllocationHandle>(this);
  }

  // Note [parked mappings]: a fresh mmap of the memfd has no page-table entries, so after
  // every cuMemMap the first touch of each 4 KiB page faults. On a virtual machine with
  // shadow paging a fault costs microseconds (17 us measured on the build machine), and so
  // does the first touch after any change of the entries (mprotect, or mremap moving them
  // one by one): copying into a freshly mapped 2 MiB chunk took 5-9 ms instead of 0.1-0.2 ms.
  // Instead, when a mapping of the whole allocation is unmapped, its page tables are moved
  // (mremap between 2 MiB-aligned addresses moves whole page-table pages, which the
  // hypervisor keeps) to a private address of this allocation ("parked"), with the
  // protection they had; the next mapping of the whole allocation moves them to its address
  // when it is granted access (Note [deferred mappings] in address_space.h), changing the
  // protection only if it differs. The pages, and so the bytes seen through every mapping,
  // are the same memfd pages either way: only faults are saved. At most one mapping is
  // parked; others are plain mmaps. Kernels without MREMAP_DONTUNMAP for shared mappings
  // (before Linux 5.13) make both calls fail, i.e. plain mmaps throughout.
  //
  // Moves the mapping of the whole allocation at [addr, addr + size()), whose protection is
  // `prot`, into parking. True on success: [addr, addr + size()) is then an empty mapping.
  // False (nothing changed) when a mapping is already parked or the move failed.
  // REQUIRES: the caller replaces the mapping at addr afterwards.
  bool Park(uint64_t addr, int prot);
  // Moves the parked mapping to [addr, addr + size()), replacing what was there, with
  // protection `prot`. False when none is parked or the move failed; then the caller
  // replaces whatever is at addr (REQUIRES: it does).
  bool Unpark(uint64_t addr, int prot);
  // Whether a mapping is parked now (it may be taken by another thread right after).
  bool parked();

  std::atomic<int> handle_refs{1};

 private:
  Physical(int fd, uint64_t size, const CUmemAllocationProp& prop, CapacityAccount* charged_to);

  const int fd_;
  const uint64_t size_;
  const CUmemAllocationProp prop_;
  CapacityAccount* const charged_to_;
  const uint64_t id_;
  memvirt::sync::Mutex park_mu_;
  // Private address range of size_ for the parked mapping; 0 = none yet.
  uint64_t home_ MEMVIRT_GUARDED_BY(park_mu_) = 0;
  // home_ holds the parked mapping (else an empty one, or nothing).
  bool parked_ MEMVIRT_GUARDED_BY(park_mu_) = false;
  int parked_prot_ MEMVIRT_GUARDED_BY(park_mu_) = 0;  // its protection
};

// Process-wide unique ids for allocations (CU_POINTER_ATTRIBUTE_BUFFER_ID and friends).
uint64_t NextAllocationId();

}  // namespace memsim

#endif  // MEMSIM_SRC_PHYSICAL_H_

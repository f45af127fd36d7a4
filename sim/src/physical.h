// A physical memory allocation (cuMemCreate): a memfd whose pages back device virtual ranges.
//
// Ownership: shared. The handle table holds one reference per outstanding handle retain
// (cuMemCreate / cuMemRetainAllocationHandle, dropped by cuMemRelease) and every mapping holds
// one, so memory that was released while still mapped lives until its last unmap, as the CUDA
// documentation specifies. Destruction closes the memfd and returns the device capacity.
//
// Thread safety: immutable after construction except handle_refs (atomic).
#ifndef MEMSIM_SRC_PHYSICAL_H_
#define MEMSIM_SRC_PHYSICAL_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "cuda_api.h"

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

  std::atomic<int> handle_refs{1};

 private:
  Physical(int fd, uint64_t size, const CUmemAllocationProp& prop, CapacityAccount* charged_to);

  const int fd_;
  const uint64_t size_;
  const CUmemAllocationProp prop_;
  CapacityAccount* const charged_to_;
  const uint64_t id_;
};

// Process-wide unique ids for allocations (CU_POINTER_ATTRIBUTE_BUFFER_ID and friends).
uint64_t NextAllocationId();

}  // namespace memsim

#endif  // MEMSIM_SRC_PHYSICAL_H_

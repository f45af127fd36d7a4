// Physical memory the shim maps into its reservation, in 2 MiB units:
// device chunks (cuMemCreate on the GPU) within the device budget, and host
// slots (cuMemCreate with CU_MEM_LOCATION_TYPE_HOST_NUMA) within the host
// budget. Both are created on first need and reused afterwards.
//
// Every host slot is also mapped permanently at its own address in a private
// "mirror" reservation, so a chunk's bytes can be copied between the device
// and the host with plain device-to-device copies on a stream.
//
// The host budget is a HostLedger's: the pool's own, or one shared by the
// cores of all the process's devices (Note [shared host budget] in
// host_ledger.h).
//
// Thread safety: not thread-safe; ShimCore serializes calls. The shared
// ledger is thread-safe.
#ifndef MEMVIRT_SHIM_CORE_PHYSICAL_POOL_H_
#define MEMVIRT_SHIM_CORE_PHYSICAL_POOL_H_

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shim/core/config.h"
#include "shim/core/host_ledger.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

class PhysicalPool {
 public:
  PhysicalPool(const Driver* driver, CUdevice device, int host_numa_id);
  ~PhysicalPool();
  PhysicalPool(const PhysicalPool&) = delete;
  PhysicalPool& operator=(const PhysicalPool&) = delete;

  // Draws host slots from `ledger` (not owned; outlives the pool) instead of
  // the pool's own. REQUIRES: before Init.
  void ShareHostLedger(HostLedger* ledger) { ledger_ = ledger; }
  // The ledger the pool draws from (its own or the shared one).
  const HostLedger* host_ledger() const { return ledger_; }

  // Sets the device budget and enables a host tier of `host_chunks` slots if
  // its preconditions hold (Note [host tier preconditions]); `host_chunks` is
  // also the most slots this pool can ever map (its mirror range), and the
  // ledger's limit unless one is set already. A failure leaves
  // the tier off (host_limit() 0: no eviction possible), logs why once and
  // returns the driver's error.
  //
  // Note [host tier preconditions]
  //   The host tier is enabled only if the device reports host-NUMA VMM
  //   support (CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_
  //   SUPPORTED), the allocation granularity of a HOST_NUMA location divides
  //   the 2 MiB chunk, the mirror range can be reserved and one slot can be
  //   created and mapped. Otherwise the tier is off from the start, so the
  //   capacity the core reports (cuMemGetInfo) and admits is only what is
  //   real: the device budget, not memory that the first eviction would fail
  //   to create.
  [[nodiscard]] CUresult Init(uint32_t device_chunks, uint32_t host_chunks);

  // Device chunks: CUDA_ERROR_OUT_OF_MEMORY when the budget is used up (the
  // caller evicts and retries) or the driver refuses.
  [[nodiscard]] CUresult AcquireDevice(uint32_t* index);
  void ReleaseDevice(uint32_t index);
  CUmemGenericAllocationHandle device_handle(uint32_t index) const { return device_[index]; }
  // Device chunks are created exportable as POSIX file descriptors
  // (cuMemExportToShareableHandle) when the device supports it (legacy IPC,
  // Note [pinned blocks] in shim_core_pin.cc). Known after Init().
  bool device_chunks_exportable() const { return exportable_; }

  // Host slots: CUDA_ERROR_OUT_OF_MEMORY when the host budget (the ledger's,
  // Note [shared host budget]) is used up.
  [[nodiscard]] CUresult AcquireHost(uint32_t* slot);
  void ReleaseHost(uint32_t slot);
  CUmemGenericAllocationHandle host_handle(uint32_t slot) const { return host_[slot]; }
  CUdeviceptr mirror(uint32_t slot) const {
    return mirror_base_ + (static_cast<uint64_t>(slot) << kChunkShift);
  }
  bool host_tier_available() const { return host_tier_on_ && host_limit() > 0; }
  // Sets the ledger's host budget in slots. Lowering it below what is in use
  // is allowed: the caller moves chunks out (spill tier) while
  // host_over_limit() > 0; free cached slots beyond it are released.
  void SetHostLimit(uint32_t chunks);

  // Devices that are also given read/write access to every mapping (the
  // device's peers, Note [peer access] in shim_core.h).
  void SetPeers(std::vector<CUdevice> peers);
  // Maps `handle` at `va` (one chunk) with read/write access for the device
  // and its peers.
  [[nodiscard]] CUresult MapAt(CUdeviceptr va, CUmemGenericAllocationHandle handle);
  // Maps `bytes` of `handle` from `offset` at `va`, with the same access.
  [[nodiscard]] CUresult MapRange(CUdeviceptr va, uint64_t bytes, uint64_t offset,
                                  CUmemGenericAllocationHandle handle);
  [[nodiscard]] CUresult UnmapAt(CUdeviceptr va);

  // Budget in device chunks. Lowering it below device_in_use() is allowed: the
  // caller evicts until device_in_use() <= device_limit().
  void SetDeviceLimit(uint32_t chunks);
  uint32_t device_limit() const { return device_limit_; }
  uint32_t device_in_use() const { return device_in_use_; }
  // The most device chunks in use at once so far.
  uint32_t device_peak() const { return device_peak_; }
  // The host budget in slots (the ledger's), at most what this pool can map.
  uint32_t host_limit() const;
  // This pool's slots holding data.
  uint32_t host_in_use() const { return host_in_use_; }
  // Slots of the (shared) host ledger that hold other cores' data.
  uint32_t host_in_use_by_others() const {
    const uint32_t all = ledger_->in_use();
    return all > host_in_use_ ? all - host_in_use_ : 0;
  }
  // Slots in use beyond the budget, over all pools sharing the ledger, but at
  // most this pool's own.
  uint32_t host_over_limit() const { return std::min(ledger_->over_limit(), host_in_use_); }

 private:
  const Driver* driver_;
  CUdevice device_id_;
  std::vector<CUmemAccessDesc> access_;  // the device first, then its peers
  int host_numa_id_;
  uint32_t device_limit_ = 0;
  bool exportable_ = false;
  HostLedger own_ledger_;
  HostLedger* ledger_ = &own_ledger_;
  bool host_tier_on_ = false;
  uint32_t device_in_use_ = 0;
  uint32_t device_peak_ = 0;
  uint32_t host_in_use_ = 0;
  std::vector<CUmemGenericAllocationHandle> device_;  // 0 = released
  std::vector<uint32_t> device_free_;
  std::vector<CUmemGenericAllocationHandle> host_;
  std::vector<uint32_t> host_free_;
  std::vector<uint32_t> host_released_;  // indices whose memory SetHostLimit gave back
  uint32_t host_mirror_slots_ = 0;       // slots the mirror range can hold
  [[nodiscard]] CUresult InitHostTier(uint32_t host_chunks, const char** why);
  CUmemAllocationProp HostSlotProperties() const;
  [[nodiscard]] CUresult CreateHostSlot(uint32_t index, CUmemGenericAllocationHandle* out);
  // Gives a free slot's memory back; false (slot unchanged) if its mirror
  // cannot be unmapped.
  bool ReleaseHostMemory(uint32_t index);
  CUdeviceptr mirror_base_ = 0;
  uint64_t mirror_bytes_ = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_PHYSICAL_POOL_H_

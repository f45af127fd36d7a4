#include "shim/core/physical_pool.h"

#include <algorithm>

#include "shim/core/log.h"

namespace memvirt::shim {

PhysicalPool::PhysicalPool(const Driver* driver, CUdevice device, int host_numa_id)
    : driver_(driver), device_id_(device), host_numa_id_(host_numa_id) {
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  access_.push_back(access);
}

PhysicalPool::~PhysicalPool() {
  for (uint32_t i = 0; i < host_.size(); ++i) {
    if (host_[i] == 0) continue;  // released already
    driver_->cuMemUnmap(mirror(i), kChunkBytes);
    driver_->cuMemRelease(host_[i]);
    ledger_->AddHeld(-1);
  }
  // Slots still holding data at teardown: the ledger outlives this pool.
  for (uint32_t i = 0; i < host_in_use_; ++i) ledger_->Uncharge();
  if (mirror_bytes_ != 0) driver_->cuMemAddressFree(mirror_base_, mirror_bytes_);
  for (CUmemGenericAllocationHandle h : device_) {
    if (h != 0) driver_->cuMemRelease(h);
  }
}

CUresult PhysicalPool::Init(uint32_t device_chunks, uint32_t host_chunks) {
  device_limit_ = device_chunks;
  int posix_fd = 0;
  exportable_ = driver_->cuDeviceGetAttribute(
                    &posix_fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                    device_id_) == CUDA_SUCCESS &&
                posix_fd != 0;
  if (host_chunks == 0) return CUDA_SUCCESS;
  const char* why = nullptr;
  const CUresult r = InitHostTier(host_chunks, &why);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kWarn,
                "host tier off: %s (%d); the device budget is the capacity, and allocations "
                "beyond it fail with CUDA_ERROR_OUT_OF_MEMORY",
                why, r);
  }
  return r;
}

CUresult PhysicalPool::InitHostTier(uint32_t host_chunks, const char** why) {
  int supported = 0;
  CUresult r = driver_->cuDeviceGetAttribute(
      &supported, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device_id_);
  if (r != CUDA_SUCCESS || supported == 0) {
    *why = "the device reports no host-NUMA virtual memory management";
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_SUPPORTED;
  }
  if (driver_->cuMemGetAllocationGranularity == nullptr) {
    *why = "the driver lacks cuMemGetAllocationGranularity";
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const CUmemAllocationProp prop = HostSlotProperties();
  size_t granularity = 0;
  r = driver_->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) {
    *why = "no allocation granularity for host-NUMA memory";
    return r;
  }
  if (granularity == 0 || kChunkBytes % granularity != 0) {
    *why = "the host-NUMA allocation granularity does not divide the 2 MiB chunk";
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const uint64_t bytes = static_cast<uint64_t>(host_chunks) << kChunkShift;
  if ((r = driver_->cuMemAddressReserve(&mirror_base_, bytes, kChunkBytes, 0, 0)) != CUDA_SUCCESS) {
    *why = "cannot reserve the host tier's mirror address range";
    return r;
  }
  mirror_bytes_ = bytes;
  // One slot now: a tier whose memory cannot be created is known off at once,
  // not at the first eviction, when allocations beyond the device have
  // already succeeded.
  CUmemGenericAllocationHandle handle = 0;
  if ((r = CreateHostSlot(0, &handle)) != CUDA_SUCCESS) {
    driver_->cuMemAddressFree(mirror_base_, mirror_bytes_);
    mirror_base_ = 0;
    mirror_bytes_ = 0;
    *why = "the first host-NUMA slot cannot be created or mapped";
    return r;
  }
  host_.push_back(handle);
  host_free_.push_back(0);
  ledger_->AddHeld(1);
  ledger_->InitLimit(host_chunks);
  host_mirror_slots_ = host_chunks;
  host_tier_on_ = true;
  return CUDA_SUCCESS;
}

CUmemAllocationProp PhysicalPool::HostSlotProperties() const {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = host_numa_id_;
  return prop;
}

CUresult PhysicalPool::MapAt(CUdeviceptr va, CUmemGenericAllocationHandle handle) {
  return MapRange(va, kChunkBytes, 0, handle);
}

CUresult PhysicalPool::MapRange(CUdeviceptr va, uint64_t bytes, uint64_t offset,
                                CUmemGenericAllocationHandle handle) {
  CUresult r = driver_->cuMemMap(va, bytes, offset, handle, 0);
  if (r != CUDA_SUCCESS) return r;
  r = driver_->cuMemSetAccess(va, bytes, access_.data(), access_.size());
  if (r != CUDA_SUCCESS) driver_->cuMemUnmap(va, bytes);
  return r;
}

void PhysicalPool::SetPeers(std::vector<CUdevice> peers) {
  access_.resize(1);
  for (CUdevice peer : peers) {
    CUmemAccessDesc access = access_[0];
    access.location.id = peer;
    access_.push_back(access);
  }
}

CUresult PhysicalPool::UnmapAt(CUdeviceptr va) { return driver_->cuMemUnmap(va, kChunkBytes); }

CUresult PhysicalPool::AcquireDevice(uint32_t* index) {
  if (device_in_use_ >= device_limit_) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!device_free_.empty()) {
    *index = device_free_.back();
    device_free_.pop_back();
    ++device_in_use_;
    device_peak_ = std::max(device_peak_, device_in_use_);
    return CUDA_SUCCESS;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_id_;
  if (exportable_) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = driver_->cuMemCreate(&handle, kChunkBytes, &prop, 0);
  if (r != CUDA_SUCCESS) return r == CUDA_ERROR_OUT_OF_MEMORY ? r : CUDA_ERROR_OUT_OF_MEMORY;
  *index = static_cast<uint32_t>(device_.size());
  device_.push_back(handle);
  ++device_in_use_;
  device_peak_ = std::max(device_peak_, device_in_use_);
  return CUDA_SUCCESS;
}

void PhysicalPool::ReleaseDevice(uint32_t index) {
  --device_in_use_;
  if (device_in_use_ + device_free_.size() + 1 > device_limit_) {
    // Over budget (the budget shrank): give the memory back to the driver.
    driver_->cuMemRelease(device_[index]);
    device_[index] = 0;
    return;
  }
  device_free_.push_back(index);
}

void PhysicalPool::SetDeviceLimit(uint32_t chunks) {
  device_limit_ = chunks;
  while (!device_free_.empty() && device_in_use_ + device_free_.size() > device_limit_) {
    uint32_t index = device_free_.back();
    device_free_.pop_back();
    driver_->cuMemRelease(device_[index]);
    device_[index] = 0;
  }
}

uint32_t PhysicalPool::host_limit() const {
  return host_tier_on_ ? std::min(ledger_->limit(), host_mirror_slots_) : 0;
}

CUresult PhysicalPool::AcquireHost(uint32_t* slot) {
  if (!host_tier_on_ || !ledger_->TryCharge()) return CUDA_ERROR_OUT_OF_MEMORY;
  if (!host_free_.empty()) {
    *slot = host_free_.back();
    host_free_.pop_back();
    ++host_in_use_;
    return CUDA_SUCCESS;
  }
  // A slot given back earlier is re-created first, else a new one.
  const bool recreate = !host_released_.empty();
  if (!recreate && host_.size() >= host_mirror_slots_) {
    ledger_->Uncharge();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint32_t index = recreate ? host_released_.back() : static_cast<uint32_t>(host_.size());
  CUmemGenericAllocationHandle handle = 0;
  if (CreateHostSlot(index, &handle) != CUDA_SUCCESS) {
    ledger_->Uncharge();
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (recreate) {
    host_released_.pop_back();
    host_[index] = handle;
  } else {
    host_.push_back(handle);
  }
  ledger_->AddHeld(1);
  *slot = index;
  ++host_in_use_;
  return CUDA_SUCCESS;
}

void PhysicalPool::SetHostLimit(uint32_t chunks) {
  ledger_->SetLimit(chunks);
  // Give back cached free slots while the process holds more than the limit.
  while (!host_free_.empty() && ledger_->held_over_limit()) {
    if (!ReleaseHostMemory(host_free_.back())) break;  // kept cached; tried again next time
    host_free_.pop_back();
  }
}

bool PhysicalPool::ReleaseHostMemory(uint32_t index) {
  if (UnmapAt(mirror(index)) != CUDA_SUCCESS) return false;
  driver_->cuMemRelease(host_[index]);
  host_[index] = 0;
  host_released_.push_back(index);
  ledger_->AddHeld(-1);
  return true;
}

CUresult PhysicalPool::CreateHostSlot(uint32_t index, CUmemGenericAllocationHandle* out) {
  const CUmemAllocationProp prop = HostSlotProperties();
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = driver_->cuMemCreate(&handle, kChunkBytes, &prop, 0);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kWarn, "host-tier cuMemCreate failed (%d)", r);
    return r;
  }
  r = MapAt(mirror(index), handle);
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kWarn, "host-tier mirror map failed (%d)", r);
    driver_->cuMemRelease(handle);
    return r;
  }
  *out = handle;
  return CUDA_SUCCESS;
}

void PhysicalPool::ReleaseHost(uint32_t slot) {
  --host_in_use_;
  ledger_->Uncharge();
  // Note [shared host budget]: cached only while the process holds no more than the limit.
  if (ledger_->held_over_limit() && ReleaseHostMemory(slot)) return;
  host_free_.push_back(slot);
}

}  // namespace memvirt::shim

// Exported entry points: the virtual memory management API (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess, ...). See address_space.h for how mappings are realized.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "api_common.h"

using memsim::Context;
using memsim::Device;
using memsim::Physical;
using namespace memsim::api;

namespace {

bool HostLocation(CUmemLocationType t) {
  return t == CU_MEM_LOCATION_TYPE_HOST || t == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         t == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

// The properties of a cuMemCreate (and cuMemGetAllocationGranularity) call, as documented for
// cuMemCreate: HOST_NUMA_CURRENT is valid only for managed-memory calls (cuMemAdvise,
// cuMemPrefetchAsync); HOST allocations are not IPC capable (requestedHandleTypes 0); HOST_NUMA
// needs CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (MEMSIM_HOST_NUMA).
// `for_create` false: the granularity query, which a driver 580 answers for HOST whatever the
// requested handle types (tests/gpu/reference/).
CUresult ValidateProp(const CUmemAllocationProp* prop, bool for_create = true) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return D().device(prop->location.id) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
    case CU_MEM_LOCATION_TYPE_HOST:
      return !for_create || prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_NONE
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;  // one NUMA node: 0
      return D().device(0)->host_numa_vmm() ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Note [map cost]: MEMSIM_MAP_US models the driver's page-table update cost of cuMemMap,
// cuMemUnmap and cuMemSetAccess (tens of microseconds on a GPU, more for large ranges): each
// successful call takes at least that long.
void ChargeMapCost() {
  const double us = D().config().map_us;
  if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

// Note [unmap is immediate]: cuMemUnmap's documentation marks it "synchronous" (\note_sync),
// which is about the host call, not a promise to wait for device work: a driver 580 on an H200
// unmaps at once while a kernel using the range runs, and that kernel then fails with
// CUDA_ERROR_ILLEGAL_ADDRESS (tests/gpu/reference/, unmap_in_use). The sim does the same: the
// range goes away when the call returns, and queued or running kernels and copies that touch it
// fault (sticky CUDA_ERROR_ILLEGAL_ADDRESS, Note [sticky errors]). Whoever unmaps must first
// wait for the work that uses the range.

int ProtFromFlags(CUmemAccess_flags flags) {
  switch (flags) {
    case CU_MEM_ACCESS_FLAGS_PROT_READ:
      return PROT_READ;
    case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
      return PROT_READ | PROT_WRITE;
    default:
      return PROT_NONE;
  }
}

Device* ReservationDevice() {
  Context* raw = memsim::CurrentContextRaw();
  if (raw != nullptr) {
    if (auto ctx = D().contexts.Get(raw)) return ctx->device();
  }
  return D().device(0);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (CUresult r = RequireInit()) return r;
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = ValidateProp(prop, /*for_create=*/false)) return r;
  *granularity = memsim::kGranularity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  if (CUresult r = RequireInit()) return r;
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = ReservationDevice();
  uint64_t out = 0;
  if (CUresult r = dev->va().Reserve(size, alignment, addr, &out)) return r;
  *ptr = out;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (CUresult r = RequireInit()) return r;
  Device* dev = D().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::shared_ptr<Physical>> dropped;
  return dev->va().FreeReservation(ptr, size, &dropped);
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ValidateProp(prop)) return r;
  if (size == 0 || size % memsim::kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  memsim::CapacityAccount* account = nullptr;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    account = &D().device(prop->location.id)->capacity();
    if (!account->TryCharge(size)) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto phys = Physical::Create(size, *prop, account);
  if (!phys) {
    if (account != nullptr) account->Release(size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  D().physical.Add(phys);
  *handle = phys->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (CUresult r = RequireInit()) return r;
  const void* key = reinterpret_cast<const void*>(handle);
  auto phys = D().physical.Get(key);
  if (!phys) return CUDA_ERROR_INVALID_VALUE;
  if (phys->handle_refs.fetch_sub(1) == 1) D().physical.Remove(key);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (CUresult r = RequireInit()) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto phys = D().physical.Get(reinterpret_cast<const void*>(handle));
  if (!phys) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = D().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = dev->va().Map(ptr, size, offset, std::move(phys));
  if (r == CUDA_SUCCESS) ChargeMapCost();
  return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  if (CUresult r = RequireInit()) return r;
  Device* dev = D().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The documentation allows CUDA_ERROR_NOT_PERMITTED for CUDA calls from host functions; the
  // sim answers so, the strict choice.
  if (memsim::OnStreamWorker()) return CUDA_ERROR_NOT_PERMITTED;
  // Note [unmap is immediate]: no wait for device work.
  std::vector<std::shared_ptr<Physical>> dropped;
  CUresult r = dev->va().Unmap(ptr, size, &dropped);  // `dropped` is released after the lock
  if (r == CUDA_SUCCESS) ChargeMapCost();
  return r;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (CUresult r = RequireInit()) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = D().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Note [per-device access] in address_space.h.
  memsim::AccessChange change;
  for (size_t i = 0; i < count; ++i) {
    const CUmemLocation& loc = desc[i].location;
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const int prot = ProtFromFlags(desc[i].flags);
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) {
      if (D().device(loc.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
      const uint32_t bit = 1u << loc.id;
      change.devices |= bit;
      change.readers &= ~bit;
      change.writers &= ~bit;
      if (prot & PROT_WRITE) {
        change.writers |= bit;
      } else if (prot & PROT_READ) {
        change.readers |= bit;
      }
    } else if (HostLocation(loc.type)) {
      change.host_prot |= prot;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  CUresult r = dev->va().SetAccess(ptr, size, change);
  if (r == CUDA_SUCCESS) ChargeMapCost();
  return r;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                CUdeviceptr ptr) {
  if (CUresult r = RequireInit()) return r;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = D().DeviceForAddress(ptr);
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = dev->va().Lookup(ptr);
  if (!info || info->kind != memsim::RangeInfo::Kind::kMapped) return CUDA_ERROR_INVALID_VALUE;
  int prot = info->prot;  // host locations: what the MMU grants
  if (location->type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (D().device(location->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    const uint32_t bit = 1u << location->id;
    prot = (info->writers & bit)   ? (PROT_READ | PROT_WRITE)
           : (info->readers & bit) ? PROT_READ
                                   : PROT_NONE;
  } else if (!HostLocation(location->type)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prot & PROT_WRITE) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  } else if (prot & PROT_READ) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  } else {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (CUresult r = RequireInit()) return r;
  auto phys = D().physical.Get(reinterpret_cast<const void*>(handle));
  if (!phys || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = phys->prop();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* dev = D().DeviceForAddress(reinterpret_cast<uint64_t>(addr));
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto info = dev->va().Lookup(reinterpret_cast<uint64_t>(addr));
  if (!info || info->kind != memsim::RangeInfo::Kind::kMapped) return CUDA_ERROR_INVALID_VALUE;
  if (info->physical->handle_refs.fetch_add(1) == 0) D().physical.Add(info->physical);
  *handle = info->physical->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) {
  if (CUresult r = RequireInit()) return r;
  auto phys = D().physical.Get(reinterpret_cast<const void*>(handle));
  if (!phys || shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // Exportable only as a type requested at creation (CUmemAllocationProp::requestedHandleTypes;
  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: "if requested via
  // cuMemCreate").
  if ((phys->prop().requestedHandleTypes & handleType) == 0) return CUDA_ERROR_INVALID_VALUE;
  const int fd = dup(phys->fd());
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  // For POSIX file descriptors the handle is passed by value in the pointer argument.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  auto phys = Physical::Import(fd, memsim::kGranularity);
  if (!phys) return CUDA_ERROR_INVALID_VALUE;
  D().physical.Add(phys);
  *handle = phys->handle();
  return CUDA_SUCCESS;
}

}  // extern "C"

// The application's own use of the VMM API: device memory it creates and maps
// itself is paged by the core like cuMemAlloc memory (Note [application VMM]
// in shim/core/shim_core_app_vmm.cc); everything else goes to the driver.
#include <atomic>

#include "shim/core/log.h"
#include "shim/hooks/hook_util.h"

using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::OwnerContext;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;

namespace {

// The core of `device` for the application's own device memory: created if
// `device` is the current context's (as for an allocation), else only if it
// exists already.
ShimCore* DeviceCore(int device) {
  Runtime& runtime = Runtime::Get();
  if (ShimCore* core = runtime.CoreOfDevice(device)) return core;
  if (runtime.driver() == nullptr) return nullptr;
  CUdevice current = -1;
  if (runtime.driver()->cuCtxGetDevice(&current) != CUDA_SUCCESS || current != device) {
    return nullptr;
  }
  return runtime.CoreForAlloc();
}

// The core of a virtual handle, or null for the driver's handles.
ShimCore* HandleCore(CUmemGenericAllocationHandle handle) {
  if (!ShimCore::IsVirtualHandle(handle)) return nullptr;
  return Runtime::Get().CoreOfDevice(ShimCore::VirtualHandleDevice(handle));
}

// Once per process: what the shim pages of the application's VMM memory and
// what it leaves to the driver.
void LogOnce(std::atomic<bool>* logged, const char* what) {
  if (!logged->exchange(true, std::memory_order_relaxed)) MEMSHIM_LOG(kInfo, "%s", what);
}

// Why a cuMemCreate is not answered with a virtual handle (null: it is).
const char* NotPaged(const CUmemAllocationProp* prop, size_t size) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return "not pinned memory";
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return "host-located memory";
  if (prop->allocFlags.compressionType != 0) return "compressible memory";
  if (prop->allocFlags.usage != 0) return "memory with a usage hint";
  if (prop->win32HandleMetaData != nullptr) return "memory with Win32 handle metadata";
  if (size == 0 || size % memvirt::shim::kChunkBytes != 0) return "memory not in 2 MiB units";
  return nullptr;
}

}  // namespace

MEMSHIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                    const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle != nullptr && flags == 0 && prop != nullptr &&
      prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    if (ShimCore* core = DeviceCore(prop->location.id)) {
      const char* why = NotPaged(prop, size);
      if (why == nullptr) {
        static std::atomic<bool> logged{false};
        LogOnce(&logged,
                "the application maps device memory of its own (cuMemCreate, e.g. PyTorch's "
                "expandable segments): the shim pages it like cuMemAlloc memory; a handle "
                "exported to another process (cuMemExportToShareableHandle) is pinned");
        return core->AppCreate(size, *prop, handle);
      }
      static std::atomic<bool> not_paged_logged{false};
      if (!not_paged_logged.exchange(true, std::memory_order_relaxed)) {
        MEMSHIM_LOG(kInfo,
                    "the application maps device memory of its own that the shim does not page "
                    "(%s): it stays resident and counts against the device budget",
                    why);
      }
      const CUresult r = Forward(Real().cuMemCreate, handle, size, prop, flags);
      if (r == CUDA_SUCCESS) {
        auto scoped = OwnerContext(core);
        core->OnAppPhysicalCreate(*handle, size);  // resident, counted against the budget
      }
      return r;
    }
  }
  return Forward(Real().cuMemCreate, handle, size, prop, flags);
}

MEMSHIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (ShimCore* core = HandleCore(handle)) return core->AppRelease(handle);
  CUresult r = Forward(Real().cuMemRelease, handle);
  if (r == CUDA_SUCCESS) {
    Runtime::Get().ForEachCore([handle](ShimCore* core) {
      auto scoped = OwnerContext(core);
      core->OnAppPhysicalRelease(handle);
    });
  }
  return r;
}

MEMSHIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                            CUdeviceptr addr, unsigned long long flags) {
  // `addr` is a hint the driver may ignore, as the shim does.
  if (ptr != nullptr && size != 0 && flags == 0) {
    if (ShimCore* core = Runtime::Get().CoreForAlloc()) {
      if (core->AppReserve(size, alignment, ptr) == CUDA_SUCCESS) return CUDA_SUCCESS;
      static std::atomic<bool> logged{false};
      LogOnce(&logged,
              "an address reservation does not fit the shim's reservation: it is the driver's, "
              "and memory created by the shim cannot be mapped in it (MEMSHIM_VA_SIZE)");
    }
  }
  return Forward(Real().cuMemAddressReserve, ptr, size, alignment, addr, flags);
}

MEMSHIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  if (ShimCore* core = Runtime::Get().OwnerOf(ptr)) return core->AppAddressFree(ptr, size);
  return Forward(Real().cuMemAddressFree, ptr, size);
}

MEMSHIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                 CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (ShimCore::IsVirtualHandle(handle)) {
    ShimCore* core = HandleCore(handle);
    if (core == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!core->Owns(ptr)) {
      static std::atomic<bool> logged{false};
      LogOnce(&logged,
              "cuMemMap of memory created by the shim outside its reservation (a range reserved "
              "before a context was current, or of another device): CUDA_ERROR_NOT_SUPPORTED");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    auto scoped = OwnerContext(core);
    return core->AppMap(ptr, size, offset, handle);
  }
  ShimCore* core = Runtime::Get().OwnerOf(ptr);
  if (core == nullptr) return Forward(Real().cuMemMap, ptr, size, offset, handle, flags);
  // The driver's handle in a range the application reserved in the shim's.
  auto scoped = OwnerContext(core);
  if (const CUresult r = core->BeginForeignMap(ptr, size); r != CUDA_SUCCESS) return r;
  const CUresult r = Forward(Real().cuMemMap, ptr, size, offset, handle, flags);
  core->EndForeignMap(ptr, size, r == CUDA_SUCCESS);
  return r;
}

// A range of the shim's reservation may hold the core's mappings and the
// driver's (an exported handle, Note [exported handles]) side by side: each
// run goes to its owner.
MEMSHIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ShimCore* core = Runtime::Get().OwnerOf(ptr);
  if (core == nullptr) return Forward(Real().cuMemUnmap, ptr, size);
  auto scoped = OwnerContext(core);
  const CUdeviceptr end = ptr + size;
  if (size == 0 || end < ptr || (ptr - core->base()) % memvirt::shim::kChunkBytes != 0) {
    return core->AppUnmap(ptr, size);  // answers the malformed range
  }
  CUresult result = CUDA_SUCCESS;
  for (CUdeviceptr at = ptr; at < end && result == CUDA_SUCCESS;) {
    const bool foreign = core->IsForeign(at, 1);
    CUdeviceptr run = at + memvirt::shim::kChunkBytes;
    while (run < end && core->IsForeign(run, 1) == foreign) run += memvirt::shim::kChunkBytes;
    run = run < end ? run : end;
    if (!foreign) {
      result = core->AppUnmap(at, run - at);
    } else if ((result = Forward(Real().cuMemUnmap, at, run - at)) == CUDA_SUCCESS) {
      core->OnForeignUnmap(at, run - at);
    }
    at = run;
  }
  return result;
}

MEMSHIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                       size_t count) {
  ShimCore* core = Runtime::Get().OwnerOf(ptr);
  if (core == nullptr || core->IsForeign(ptr, size)) {
    return Forward(Real().cuMemSetAccess, ptr, size, desc, count);
  }
  return core->AppSetAccess(ptr, size, desc, count);
}

MEMSHIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(
    CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  if (ShimCore::IsVirtualHandle(handle)) {
    ShimCore* core = HandleCore(handle);
    return core != nullptr ? core->AppProperties(prop, handle) : CUDA_ERROR_INVALID_VALUE;
  }
  return Forward(Real().cuMemGetAllocationPropertiesFromHandle, prop, handle);
}

// Note [exported handles] in shim/core/shim_core_app_vmm.cc: a virtual
// handle is pinned in driver memory, and that is exported.
MEMSHIM_EXPORT CUresult cuMemExportToShareableHandle(void* shareable,
                                                     CUmemGenericAllocationHandle handle,
                                                     CUmemAllocationHandleType type,
                                                     unsigned long long flags) {
  if (ShimCore::IsVirtualHandle(handle)) {
    ShimCore* core = HandleCore(handle);
    if (core == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto scoped = OwnerContext(core);
    return core->AppExport(shareable, handle, type, flags);
  }
  return Forward(Real().cuMemExportToShareableHandle, shareable, handle, type, flags);
}

// Exported entry points: memory pools named by location and allocation type (CUDA 13:
// cuMemGetDefaultMemPool, cuMemGetMemPool, cuMemSetMemPool). Device locations with pinned
// allocations map to the device's default and current pools (cuDeviceGetDefaultMemPool /
// cuDeviceGetMemPool / cuDeviceSetMemPool); the sim has no host-located or managed pools.
#include "api_common.h"

using memsim::Device;
using namespace memsim::api;

namespace {

CUresult PoolDevice(const CUmemLocation* location, CUmemAllocationType type, Device** device) {
  if (CUresult r = RequireInit()) return r;
  if (location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return type == CU_MEM_ALLOCATION_TYPE_MANAGED ? CUDA_ERROR_NOT_SUPPORTED
                                                  : CUDA_ERROR_INVALID_VALUE;
  }
  switch (location->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return ResolveDevice(location->id, device) == CUDA_SUCCESS ? CUDA_SUCCESS
                                                                 : CUDA_ERROR_INVALID_VALUE;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool* pool_out, CUmemLocation* location,
                                        CUmemAllocationType type) {
  Device* device;
  if (CUresult r = PoolDevice(location, type, &device)) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool_out = device->default_pool()->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool* pool_out, CUmemLocation* location,
                                 CUmemAllocationType type) {
  Device* device;
  if (CUresult r = PoolDevice(location, type, &device)) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool_out = device->current_pool()->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                 CUmemoryPool pool) {
  Device* device;
  if (CUresult r = PoolDevice(location, type, &device)) return r;
  auto p = D().pools.Get(pool);
  if (!p || p->device() != device) return CUDA_ERROR_INVALID_VALUE;
  device->set_current_pool(p);
  return CUDA_SUCCESS;
}

}  // extern "C"

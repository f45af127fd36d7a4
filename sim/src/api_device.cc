// Exported entry points: initialization, version, devices, error strings.
#include <cstdio>
#include <cstring>

#include "api_common.h"
#include "errors.h"

using memsim::Device;
using namespace memsim::api;

extern "C" {

CUresult CUDAAPI cuInit(unsigned int Flags) { return D().Init(Flags); }

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = memsim::ErrorName(error);
  *pStr = name;
  return name != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* text = memsim::ErrorString(error);
  *pStr = text;
  return text != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (CUresult r = RequireInit()) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = D().device_count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = RequireInit()) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (D().device(ordinal) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", d->name().c_str());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *uuid = d->uuid();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = d->capacity().capacity();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(unsigned int* bytes, CUdevice dev) {
  size_t total = 0;
  if (CUresult r = cuDeviceTotalMem_v2(&total, dev)) return r;
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *bytes = total > 0xffffffffULL ? 0xffffffffU : static_cast<unsigned>(total);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return d->Attribute(attrib, pi);
}

CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  d->Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major);
  d->Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pciBusId == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", d->ordinal() + 1);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice* dev, const char* pciBusId) {
  if (CUresult r = RequireInit()) return r;
  if (dev == nullptr || pciBusId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4 &&
      std::sscanf(pciBusId, "%x:%x.%x", &bus, &device, &function) != 3) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int ordinal = static_cast<int>(bus) - 1;
  if (domain != 0 || device != 0 || D().device(ordinal) == nullptr) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  Device* a;
  Device* b;
  if (CUresult r = ResolveDevice(dev, &a)) return r;
  if (CUresult r = ResolveDevice(peerDev, &b)) return r;
  if (canAccessPeer == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *canAccessPeer = a != b ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pool_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool_out = d->default_pool()->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pool = d->current_pool()->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  auto p = D().pools.Get(pool);
  if (!p || p->device() != d) return CUDA_ERROR_INVALID_VALUE;
  d->set_current_pool(p);
  return CUDA_SUCCESS;
}

}  // extern "C"

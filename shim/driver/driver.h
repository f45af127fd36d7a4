// The driver function table the shim core calls through.
//
// Every real CUDA driver entry point used by shim/core is reached through a
// `Driver` value, never by name: the hook layer fills it from the real
// libcuda.so.1 (dlopen + the real dlsym), tests fill it from a fake
// (shim/testing/fake_driver.h) or a fault-injecting wrapper around one.
//
// Thread safety: a Driver is an immutable table of function pointers after it
// has been filled; it may be read from any thread. The functions it points to
// have the thread-safety of the CUDA driver API.
//
// Note [why a table and not virtual methods]
//   The core calls the driver on its hot path (event records, stream waits).
//   A plain table of C function pointers costs one indirect call, matches the
//   driver's own ABI exactly (the same types as cuda.h) and lets a test swap a
//   single entry for fault injection without subclassing anything.
#ifndef MEMVIRT_SHIM_DRIVER_DRIVER_H_
#define MEMVIRT_SHIM_DRIVER_DRIVER_H_

#include <cuda.h>

namespace memvirt::shim {

#define MEMSHIM_DRIVER_FN(name) decltype(&::name) name = nullptr

// X-list of the driver entry points the core needs: (name, required).
// Optional entries may stay null; the core checks before calling them.
#define MEMSHIM_DRIVER_FUNCTIONS(X)           \
  X(cuCtxGetCurrent, true)                    \
  X(cuCtxGetDevice, true)                     \
  X(cuDeviceGetAttribute, true)               \
  X(cuMemGetInfo_v2, true)                    \
  X(cuMemAddressReserve, true)                \
  X(cuMemAddressFree, true)                   \
  X(cuMemCreate, true)                        \
  X(cuMemRelease, true)                       \
  X(cuMemMap, true)                           \
  X(cuMemUnmap, true)                         \
  X(cuMemSetAccess, true)                     \
  X(cuMemcpyDtoDAsync_v2, true)               \
  X(cuStreamCreate, true)                     \
  X(cuStreamDestroy_v2, true)                 \
  X(cuStreamWaitEvent, true)                  \
  X(cuEventCreate, true)                      \
  X(cuEventRecord, true)                      \
  X(cuEventQuery, true)                       \
  X(cuEventSynchronize, true)                 \
  X(cuEventDestroy_v2, true)                  \
  X(cuFuncGetParamInfo, false)                \
  X(cuKernelGetParamInfo, false)              \
  X(cuStreamIsCapturing, false)               \
  X(cuGraphGetNodes, false)                   \
  X(cuGraphNodeGetType, false)                \
  X(cuGraphKernelNodeGetParams_v2, false)     \
  X(cuGraphMemcpyNodeGetParams, false)        \
  X(cuGraphMemsetNodeGetParams, false)        \
  X(cuGraphChildGraphNodeGetGraph, false)     \
  X(cuMemGetAllocationGranularity, false)     \
  X(cuDeviceGetUuid_v2, false)                \
  X(cuCtxPushCurrent_v2, false)               \
  X(cuCtxPopCurrent_v2, false)                \
  X(cuMemcpyHtoDAsync_v2, false)              \
  X(cuMemcpyDtoHAsync_v2, false)              \
  X(cuMemHostRegister_v2, false)              \
  X(cuMemHostUnregister, false)               \
  X(cuThreadExchangeStreamCaptureMode, false) \
  X(cuMemExportToShareableHandle, false)      \
  X(cuMemImportFromShareableHandle, false)    \
  X(cuDeviceGetCount, false)                  \
  X(cuDeviceCanAccessPeer, false)             \
  X(cuCtxSynchronize, false)                  \
  X(cuStreamSynchronize, true)

struct Driver {
#define MEMSHIM_DECLARE_MEMBER(name, required) MEMSHIM_DRIVER_FN(name);
  MEMSHIM_DRIVER_FUNCTIONS(MEMSHIM_DECLARE_MEMBER)
#undef MEMSHIM_DECLARE_MEMBER
};

// Resolves one exported driver symbol by name; returns null if absent.
using SymbolResolver = void* (*)(void* context, const char* name);

// Fills `driver` through `resolve`. Returns false (and names the first missing
// required symbol in *missing) if a required entry point is absent.
bool LoadDriver(SymbolResolver resolve, void* context, Driver* driver, const char** missing);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_DRIVER_DRIVER_H_

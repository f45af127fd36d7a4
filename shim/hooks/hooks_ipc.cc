// Legacy IPC (Note [shim ipc] in shim/core/ipc_export.h) and the VMM queries
// that would expose the shim's chunks (Note [retained handles]).
#include "shim/hooks/hooks_ipc.h"

#include "shim/core/ipc_channel.h"
#include "shim/core/ipc_export.h"
#include "shim/core/ipc_import.h"
#include "shim/hooks/hook_util.h"

using memvirt::shim::IpcExporter;
using memvirt::shim::IpcImporter;
using memvirt::shim::ShimCore;
using memvirt::shim::ShimIpcHandle;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;

namespace {

ShimCore* Owner(CUdeviceptr ptr) { return Runtime::Get().OwnerOf(ptr); }

// Created on first use and never destroyed: the exporter's listener thread
// runs until the process ends.
IpcExporter* Exporter() {
  static IpcExporter* exporter = new IpcExporter(Runtime::Get().driver());
  return exporter;
}

IpcImporter* Importer() {
  static IpcImporter* importer = new IpcImporter(Runtime::Get().driver());
  return importer;
}

// A shim handle, to be opened by the shim: false for the driver's handles
// (and whenever the shim only forwards).
bool ShimHandle(const CUipcMemHandle& handle, ShimIpcHandle* decoded) {
  const Runtime& runtime = Runtime::Get();
  return runtime.ready() && !runtime.disabled() && runtime.driver() != nullptr &&
         memvirt::shim::DecodeIpcHandle(handle, decoded);
}

template <typename Fn>
CUresult Open(Fn real, CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  ShimIpcHandle decoded;
  if (ShimHandle(handle, &decoded)) return Importer()->Open(decoded, flags, pdptr);
  return Forward(real, pdptr, handle, flags);
}

}  // namespace

namespace memvirt::shim::hooks {

bool DeferFreeOfExported(ShimCore* core, CUdeviceptr ptr) {
  return Exporter()->DeferFree(core, ptr);
}

}  // namespace memvirt::shim::hooks

MEMSHIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (ShimCore* core = Owner(dptr); core != nullptr && !core->IsForeign(dptr, 1)) {
    // The driver refuses VMM memory (Note [application VMM]).
    if (core->IsAppMapped(dptr)) return CUDA_ERROR_INVALID_VALUE;
    return Exporter()->Export(core, dptr, handle);
  }
  return Forward(Real().cuIpcGetMemHandle, handle, dptr);
}

MEMSHIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                              unsigned int flags) {
  return Open(Real().cuIpcOpenMemHandle_v2, pdptr, handle, flags);
}

MEMSHIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                           unsigned int flags) {
  return Open(Real().cuIpcOpenMemHandle, pdptr, handle, flags);
}

MEMSHIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  const Runtime& runtime = Runtime::Get();
  if (runtime.ready() && !runtime.disabled() && runtime.driver() != nullptr) {
    bool handled = false;
    const CUresult r = Importer()->Close(dptr, &handled);
    if (handled) return r;
  }
  return Forward(Real().cuIpcCloseMemHandle, dptr);
}

// Note [retained handles]
//   cuMemRetainAllocationHandle on a shim address would return whichever
//   2 MiB chunk is mapped there now (a device chunk or a host-tier slot, or
//   nothing), which changes when the chunk pages, and never the whole
//   allocation. Shim memory is cuMemAlloc memory to the application, so the
//   shim answers as the driver does for cuMemAlloc memory:
//   CUDA_ERROR_INVALID_VALUE ("not mapped by cuMemMap"). Programs take that
//   as "not VMM memory" (NCCL's user-buffer registration then uses legacy
//   IPC, which CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE offers, or
//   does not register the buffer). No handle of a shim chunk is ever given
//   out. Memory the application mapped itself answers with the application's
//   handle: its virtual handle (Note [application VMM] in
//   shim/core/shim_core_app_vmm.cc), or the driver's for a driver handle the
//   application mapped in a range reserved in the shim's reservation.
MEMSHIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                    void* addr) {
  const CUdeviceptr ptr = reinterpret_cast<CUdeviceptr>(addr);
  if (ShimCore* core = Owner(ptr); core != nullptr && !core->IsForeign(ptr, 1)) {
    return core->AppRetain(handle, ptr);  // CUDA_ERROR_INVALID_VALUE for cuMemAlloc memory
  }
  return Forward(Real().cuMemRetainAllocationHandle, handle, addr);
}

// Legacy IPC of shim memory, as seen by the other hook files.
#ifndef MEMVIRT_SHIM_HOOKS_HOOKS_IPC_H_
#define MEMVIRT_SHIM_HOOKS_HOOKS_IPC_H_

#include <cuda.h>

#include "shim/core/shim_core.h"

namespace memvirt::shim::hooks {

// Before cuMemFree(Async) of `ptr`, a block of `core`: true if the free is
// deferred because another process has the block open (IpcExporter::DeferFree).
bool DeferFreeOfExported(ShimCore* core, CUdeviceptr ptr);

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_HOOKS_IPC_H_

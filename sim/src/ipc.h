// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle / cuIpcCloseMemHandle) for cuMemAlloc
// memory between processes of one node.
//
// Note [ipc backing]: each device's classic allocations (cuMemAlloc, cuMemAllocPitch, pools) are
// MAP_SHARED pages of one sparse memfd per device, at the allocation's offset in the device's
// address region (address_space.h); freeing punches the pages out of the file. A memory handle
// carries the exporter's pid, that memfd's descriptor number, the offset and size, the
// allocation's buffer id and a hash of MEMSIM_NODE. The importer opens the exporter's
// descriptor through /proc/<pid>/fd/<n> (allowed for processes of the same user; pidfd_getfd
// would need ptrace-attach rights, which Yama denies between siblings) and maps the range into
// its own device region. Opening in the exporting process is CUDA_ERROR_INVALID_CONTEXT, a
// handle of another node (or a malformed one) CUDA_ERROR_INVALID_VALUE, an exporter that is
// gone CUDA_ERROR_MAP_FAILED. VMM (cuMemCreate) and pool (cuMemAllocAsync) memory cannot be
// exported (CUDA_ERROR_INVALID_VALUE): the documentation admits cuMemAlloc memory only.
// Opening a handle twice in one context returns the same pointer with a reference count, as
// documented; cuIpcCloseMemHandle unmaps at zero.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_IPC_H_
#define MEMSIM_SRC_IPC_H_

#include <cstdint>

#include "cuda_api.h"

namespace memsim {

class Context;

// FNV-1a of MEMSIM_NODE, carried in IPC handles: a handle of another node is refused.
uint64_t IpcNodeHash();

CUresult ExportMemHandle(uint64_t dptr, CUipcMemHandle* out);
CUresult OpenMemHandle(Context* ctx, const CUipcMemHandle& handle, uint64_t* out);
CUresult CloseMemHandle(uint64_t dptr);
// Drops the opened-handle records of a context being destroyed (which unmaps their memory).
void ForgetIpcOpenedBy(const Context* ctx);

}  // namespace memsim

#endif  // MEMSIM_SRC_IPC_H_

// Legacy CUDA IPC for shim memory: the importing side (Note [shim ipc] in
// ipc_export.h). Handles of the plain driver never reach it (the hooks
// forward them).
//
// Thread safety: thread-safe (one mutex; an open holds it while it talks to
// the exporter).
#ifndef MEMVIRT_SHIM_CORE_IPC_IMPORT_H_
#define MEMVIRT_SHIM_CORE_IPC_IMPORT_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "shim/core/ipc_channel.h"
#include "shim/core/thread_annotations.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

class IpcImporter {
 public:
  // REQUIRES: `driver` outlives the importer.
  explicit IpcImporter(const Driver* driver) : driver_(driver) {}
  IpcImporter(const IpcImporter&) = delete;
  IpcImporter& operator=(const IpcImporter&) = delete;

  // cuIpcOpenMemHandle for a shim handle, as the driver documents it: a
  // current context is required and the exporting process cannot open its
  // own handle (CUDA_ERROR_INVALID_CONTEXT), `flags` must be
  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (else CUDA_ERROR_INVALID_VALUE), a
  // second open in the same context returns the same address and counts a
  // reference. An exporter that cannot be reached: CUDA_ERROR_MAP_FAILED;
  // one that refuses the handle (freed, unknown): its answer.
  CUresult Open(const ShimIpcHandle& handle, unsigned int flags, CUdeviceptr* out);
  // cuIpcCloseMemHandle: drops one reference of the import at `ptr`, and at
  // the last one unmaps it and ends the connection (the exporter unpins).
  // *handled = false (nothing done) if `ptr` is no import of a shim handle.
  CUresult Close(CUdeviceptr ptr, bool* handled);

 private:
  struct Import {
    CUcontext context = nullptr;
    uint32_t pid = 0;
    uint64_t listener = 0;
    uint64_t export_id = 0;
    CUdeviceptr reservation = 0;
    uint64_t reserved_bytes = 0;
    CUdeviceptr ptr = 0;  // what Open returned
    uint32_t refs = 0;
    int sock = -1;  // open as long as the import (Note [shim ipc])
  };
  // Receives the chunks' descriptors and maps them; fills `import`.
  [[nodiscard]] CUresult MapChunks(int sock, const ShimIpcHandle& handle, Import* import);

  const Driver* const driver_;
  Mutex mu_;
  std::vector<Import> imports_ MEMSHIM_GUARDED_BY(mu_);
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_IPC_IMPORT_H_

// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle /
// cuIpcCloseMemHandle) for shim memory: the exporting side.
//
// Note [shim ipc]
//   The driver refuses legacy IPC on VMM memory, and every shim block is VMM
//   memory (2 MiB chunks mapped into the shim's reservation), so the shim
//   provides it itself, process to process:
//   * Export (cuIpcGetMemHandle on the base of a shim block): the block is
//     pinned on the device (ShimCore::PinBlock, Note [pinned blocks]) and
//     gets an export record; the 64-byte handle (ShimIpcHandle in
//     ipc_channel.h) carries the exporter's pid and listener nonce, which
//     name its abstract Unix socket, the record's id, a random token, and
//     the block's offset in its first chunk and size. Asking again for a
//     block that is exported returns the same handle.
//   * The exporter's listener thread (started with the first export)
//     accepts connections from processes of the same user (SO_PEERCRED),
//     checks the id and token, pins the block again if it was unpinned,
//     exports each chunk as a POSIX file descriptor
//     (cuMemExportToShareableHandle; the shim's device chunks are created
//     with that handle type, PhysicalPool) and passes them with SCM_RIGHTS.
//   * Open (ipc_import.h): the importer imports the descriptors
//     (cuMemImportFromShareableHandle), maps them in a reservation of its
//     own, grants its device access and returns the block's address in it.
//     The connection stays open as long as the import.
//   * Close: the importer waits for its work, unmaps and closes
//     the connection; when the exporter sees the last connection of a
//     record end (a crashed importer's too), it unpins the block, which
//     pages as any other from then on. A later open pins it again.
//   * Free: cuMemFree of an exported block drops its record; while another
//     process still has it open, the free is deferred until the last close,
//     so its chunks are never reused under an importer.
//   While pinned, the block counts against the exporter's device budget
//   like any resident memory and is never evicted; a block that the device
//   budget cannot hold beside what is pinned is not exported
//   (CUDA_ERROR_OUT_OF_MEMORY).
//
// Thread safety: thread-safe. Lock order: IpcExporter::mu_ before the
// core's lock (the exporter calls the core while holding mu_; the core never
// calls the exporter).
#ifndef MEMVIRT_SHIM_CORE_IPC_EXPORT_H_
#define MEMVIRT_SHIM_CORE_IPC_EXPORT_H_

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "shim/core/shim_core.h"
#include "shim/core/thread_annotations.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

class IpcExporter {
 public:
  // REQUIRES: `driver` outlives the exporter (the process: it is never
  // destroyed while its listener runs).
  explicit IpcExporter(const Driver* driver);
  IpcExporter(const IpcExporter&) = delete;
  IpcExporter& operator=(const IpcExporter&) = delete;

  // cuIpcGetMemHandle for `ptr`, owned by `core`: CUDA_ERROR_INVALID_VALUE
  // unless `ptr` is the base of a live block; CUDA_ERROR_NOT_SUPPORTED if
  // the device's chunks cannot be exported; CUDA_ERROR_OUT_OF_MEMORY if it
  // cannot be pinned. REQUIRES: the core's context is current.
  CUresult Export(ShimCore* core, CUdeviceptr ptr, CUipcMemHandle* out);

  // Before the application frees `ptr` (a block of `core`): true if the
  // free is deferred (another process has the block open; the exporter
  // frees it after the last close), false if the caller frees it now (any
  // export of it has been dropped). Cheap while nothing is exported.
  bool DeferFree(ShimCore* core, CUdeviceptr ptr);

  // For tests and logs.
  struct Stats {
    uint64_t exports = 0;  // records now
    uint64_t opens = 0;    // imports served, in total
    uint64_t closes = 0;   // imports ended, in total
    uint64_t pinned = 0;   // records whose block is pinned now
  };
  Stats stats();

 private:
  struct Record {
    ShimCore* core = nullptr;
    CUdeviceptr ptr = 0;
    uint64_t token = 0;
    bool pinned = false;
    bool freed = false;  // the application freed it; freed for real at the last close
    uint32_t opens = 0;  // connections holding an import
    ShimCore::PinnedBlock block;
  };
  struct Connection {
    int fd = -1;
    uint64_t export_id = 0;  // 0: no import served on it yet
  };

  [[nodiscard]] CUresult PinLocked(Record* record) MEMSHIM_REQUIRES(mu_);
  void UnpinLocked(Record* record) MEMSHIM_REQUIRES(mu_);
  [[nodiscard]] bool StartListenerLocked() MEMSHIM_REQUIRES(mu_);
  void Listen(int listen_fd);
  // Serves one request on `conn`; false if the connection is to be closed.
  bool Serve(Connection* conn);
  void OnConnectionEnd(const Connection& conn);
  // Exports `record`'s chunks as file descriptors (appended to `fds`).
  [[nodiscard]] CUresult ExportChunks(const Record& record, std::vector<int>* fds);

  const Driver* const driver_;
  std::atomic<uint32_t> records_{0};  // DeferFree's fast path
  Mutex mu_;
  std::unordered_map<uint64_t, Record> by_id_ MEMSHIM_GUARDED_BY(mu_);
  std::unordered_map<CUdeviceptr, uint64_t> by_ptr_ MEMSHIM_GUARDED_BY(mu_);  // live blocks only
  uint64_t next_id_ MEMSHIM_GUARDED_BY(mu_) = 1;
  uint32_t listener_pid_ MEMSHIM_GUARDED_BY(mu_) = 0;  // 0 = none
  uint64_t listener_ MEMSHIM_GUARDED_BY(mu_) = 0;      // socket nonce
  Stats stats_ MEMSHIM_GUARDED_BY(mu_);
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_IPC_EXPORT_H_

// Interprocess events (cuIpcGetEventHandle / cuIpcOpenEventHandle) between processes of one
// node.
//
// Note [ipc events]: an event created with CU_EVENT_INTERPROCESS keeps its record state in one
// page of a memfd, mapped shared: `recorded`, the generation of its latest record, and
// `completed`, the highest generation whose marker its stream has executed. A handle carries
// the exporter's pid, that memfd's descriptor number and a hash of MEMSIM_NODE; the importer
// opens the descriptor through /proc/<pid>/fd/<n> (as legacy memory handles do, Note [ipc
// backing] in ipc.h) and gets a new event of its current context that shares the page. It is
// complete when `completed` >= `recorded` (never recorded: complete); cuEventSynchronize and
// cuStreamWaitEvent on it wait for the generation recorded at the time of the call, polling the
// page (the stream waits on its worker thread). Records of the exporting process update the page;
// an opened event cannot be recorded (CUDA_ERROR_NOT_SUPPORTED) or exported again.
//
// Thread safety: thread-safe (the counters are atomics in shared memory).
#ifndef MEMSIM_SRC_IPC_EVENT_H_
#define MEMSIM_SRC_IPC_EVENT_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "cuda_api.h"

namespace memsim {

class SharedEventState {
 public:
  // A new page (memfd); nullptr if it cannot be created.
  static std::shared_ptr<SharedEventState> Create();
  // The page of another process's event; nullptr if it cannot be opened.
  static std::shared_ptr<SharedEventState> Open(int pid, int fd);
  ~SharedEventState();
  SharedEventState(const SharedEventState&) = delete;
  SharedEventState& operator=(const SharedEventState&) = delete;

  int fd() const { return fd_; }
  // A new record: its generation.
  uint64_t BeginRecord();
  // The marker of `generation` executed.
  void Completed(uint64_t generation);
  uint64_t recorded() const;
  bool Reached(uint64_t generation) const;
  bool Complete() const { return Reached(recorded()); }
  // Blocks until Reached(generation).
  void WaitFor(uint64_t generation) const;

 private:
  struct Page {
    std::atomic<uint64_t> recorded;
    std::atomic<uint64_t> completed;
  };
  SharedEventState(int fd, Page* page) : fd_(fd), page_(page) {}
  const int fd_;
  Page* const page_;
};

// cuIpcGetEventHandle: the handle of an interprocess event's state.
void ExportEventHandle(const SharedEventState& state, CUipcEventHandle* out);
// cuIpcOpenEventHandle: the state named by `handle`. CUDA_ERROR_INVALID_VALUE for a malformed
// handle or one of another node, CUDA_ERROR_INVALID_CONTEXT in the exporting process,
// CUDA_ERROR_MAP_FAILED if the exporter's descriptor cannot be opened.
CUresult OpenEventHandle(const CUipcEventHandle& handle, std::shared_ptr<SharedEventState>* out);

}  // namespace memsim

#endif  // MEMSIM_SRC_IPC_EVENT_H_

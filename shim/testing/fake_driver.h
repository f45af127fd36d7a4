// A host-memory fake of the driver functions in shim/driver/driver.h, for
// unit tests of shim/core without a GPU or the simulator.
//
// Device "memory" is real: physical allocations are memfd objects, a VA
// reservation is a PROT_NONE mapping, cuMemMap maps the memfd there. So a
// test can write through a pointer the shim handed out, let the shim page it
// out and back, and compare checksums. Streams run their work immediately
// unless held (Hold/Release), which lets tests keep operations "in flight"
// and check that the shim never remaps memory that pending work may touch.
//
// Thread safety: all fake entry points are serialized by one internal mutex.
// Only one FakeDriver may exist at a time (the driver ABI has no context
// pointer, so the entry points find the instance through a global).
#ifndef MEMVIRT_SHIM_TESTING_FAKE_DRIVER_H_
#define MEMVIRT_SHIM_TESTING_FAKE_DRIVER_H_

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "shim/driver/driver.h"

namespace memvirt::shim::testing {

class FakeDriver {
 public:
  explicit FakeDriver(uint64_t device_bytes);
  ~FakeDriver();

  const Driver& driver() const { return driver_; }

  // A kernel: the fake reports `param_sizes` through cuFuncGetParamInfo.
  // An empty `param_sizes` with `opaque` = true makes cuFuncGetParamInfo fail.
  CUfunction MakeFunction(std::vector<uint32_t> param_sizes, bool opaque = false);
  // A CUkernel launched as a CUfunction (as NVIDIA's runtime does): only
  // cuKernelGetParamInfo reports `param_sizes`; cuFuncGetParamInfo answers
  // `func_answer` (CUDA_ERROR_INVALID_HANDLE, as the strict driver, or the
  // ambiguous CUDA_ERROR_INVALID_VALUE). cuKernelGetParamInfo given a
  // function answers CUDA_ERROR_INVALID_HANDLE.
  CUfunction MakeKernel(std::vector<uint32_t> param_sizes, CUresult func_answer);

  // Enqueues `work` on `stream` (what a launch or copy would do on a GPU).
  void Enqueue(CUstream stream, std::function<void()> work);
  // Enqueues a kernel body that touches [ptr, ptr + bytes): the fake checks
  // that every byte is mapped when the body runs and counts a fault if not.
  void EnqueueTouch(CUstream stream, CUdeviceptr ptr, uint64_t bytes, std::function<void()> body);

  // Held streams queue work until released (events on them stay pending).
  void Hold(CUstream stream);
  void Release(CUstream stream);
  CUstream CreateStream();
  // Streams created through cuStreamCreate from now on start held.
  void set_hold_new_streams(bool v) { hold_new_streams_ = v; }
  // cuMemAddressReserve of more than `bytes` fails with OUT_OF_MEMORY (0: no limit).
  void set_max_reservation(uint64_t bytes) { max_reservation_ = bytes; }
  std::vector<CUstream> created_streams();

  // Graphs for the driver's graph queries (cuGraphGetNodes, ...): nodes are
  // described here; nothing executes them (a test enqueues the work itself).
  CUgraph MakeGraph();
  // A kernel node whose arguments are the 8-byte `words` (kernelParams), or,
  // with `via_extra`, one CU_LAUNCH_PARAM_BUFFER_POINTER buffer holding them.
  void AddKernelNode(CUgraph graph, CUfunction f, std::vector<uint64_t> words,
                     bool via_extra = false);
  void AddMemsetNode(CUgraph graph, CUdeviceptr dst, uint64_t bytes);
  void AddMemcpyNode(CUgraph graph, CUdeviceptr dst, CUdeviceptr src, uint64_t bytes);
  void AddChildGraphNode(CUgraph graph, CUgraph child);
  void AddNode(CUgraph graph, CUgraphNodeType type);  // no parameters (host, empty, ...)

  bool IsMapped(CUdeviceptr ptr, uint64_t bytes);
  uint64_t faults() const { return faults_; }
  uint64_t device_bytes_in_use() const { return device_used_; }
  uint64_t host_bytes_in_use() const { return host_used_; }
  uint64_t copies() const { return copies_; }
  uint64_t maps() const { return maps_; }
  void set_host_numa_supported(bool v) { host_numa_supported_ = v; }

 private:
  friend struct FakeEntryPoints;
  struct Physical {
    int fd = -1;
    uint64_t bytes = 0;
    bool host = false;
  };
  struct Stream;
  struct Event {
    Stream* stream = nullptr;
    uint64_t recorded = 0;
    uint64_t completed = 0;
  };
  struct Op {
    std::function<void()> fn;
    Event* wait = nullptr;  // a cuStreamWaitEvent entry
    uint64_t wait_token = 0;
  };
  struct Stream {
    bool held = false;
    std::deque<Op> queue;
  };

  struct GraphNode {
    CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
    CUfunction func = nullptr;
    std::vector<uint64_t> words;
    std::vector<void*> params;  // into `words`
    size_t extra_bytes = 0;
    void* extra[5] = {};
    CUDA_MEMCPY3D copy{};
    CUDA_MEMSET_NODE_PARAMS memset{};
    CUgraph child = nullptr;
  };
  struct Graph {
    std::vector<std::unique_ptr<GraphNode>> nodes;
  };
  GraphNode* NewNode(CUgraph graph, CUgraphNodeType type);

  // Runs every stream as far as it can go (held streams stay put).
  void DrainLocked();
  // Runs the front op of `s` if its wait is satisfiable; false if blocked.
  bool StepLocked(Stream* s, bool force);
  Stream* StreamOf(CUstream handle);
  // Runs the recording stream until `event` completes; false if it cannot.
  bool RunUntil(Event* event, bool force);

  Driver driver_;
  std::recursive_mutex mu_;
  uint64_t device_capacity_;
  uint64_t device_used_ = 0;
  uint64_t host_used_ = 0;
  uint64_t faults_ = 0;
  uint64_t copies_ = 0;
  uint64_t maps_ = 0;
  bool host_numa_supported_ = true;
  bool hold_new_streams_ = false;
  uint64_t max_reservation_ = 0;
  std::vector<CUstream> created_;
  uint64_t next_handle_ = 1;
  std::map<CUmemGenericAllocationHandle, Physical> physical_;
  std::map<CUdeviceptr, uint64_t> reservations_;  // base -> bytes
  std::set<CUdeviceptr> mapped_;                  // mapped 2 MiB pages
  std::vector<std::unique_ptr<Stream>> streams_;
  Stream legacy_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<std::unique_ptr<std::vector<uint32_t>>> functions_;
  std::vector<std::unique_ptr<Graph>> graphs_;
  std::set<const void*> opaque_functions_;
  std::map<const void*, CUresult> kernels_;  // CUkernel handle -> cuFuncGetParamInfo's answer
  int context_token_ = 0;
};

// Fault injection: a Driver that forwards to `base` except where a switch
// makes the next N calls of one entry point fail. Switches are global (the
// driver ABI has no context pointer); one FaultInjector at a time.
class FaultInjector {
 public:
  explicit FaultInjector(const Driver& base);
  ~FaultInjector();
  const Driver& driver() const { return driver_; }

  void FailMemCreate(int times) { fail_create_ = times; }
  // The `after` calls first succeed.
  void FailMemMap(int times, int after = 0) {
    fail_map_ = times;
    pass_map_ = after;
  }
  void FailMemUnmap(int times) { fail_unmap_ = times; }
  void FailSetAccess(int times) { fail_set_access_ = times; }
  // cuMemcpyDtoDAsync (page-in and page-out copies).
  void FailCopy(int times) { fail_copy_ = times; }
  // cuMemcpyHtoDAsync and cuMemcpyDtoHAsync (spill-tier staging copies).
  void FailHostCopy(int times) { fail_host_copy_ = times; }
  void FailEventRecord(int times) { fail_event_record_ = times; }
  // cuEventSynchronize fails without running the stream.
  void FailEventSynchronize(int times) { fail_event_sync_ = times; }
  int event_synchronize_failures_left() const { return fail_event_sync_; }
  void FailStreamWaitEvent(int times) { fail_stream_wait_ = times; }
  // cuEventQuery answers CUDA_ERROR_LAUNCH_FAILED (whether or not the event completed).
  void FailEventQuery(int times) { fail_event_query_ = times; }
  // Every switch off.
  void ClearFaults() {
    fail_create_ = fail_map_ = fail_unmap_ = fail_set_access_ = fail_copy_ = fail_host_copy_ =
        fail_event_record_ = fail_event_sync_ = fail_stream_wait_ = fail_event_query_ = pass_map_ =
            0;
  }

 private:
  friend struct FaultEntryPoints;
  Driver base_;
  Driver driver_;
  int fail_create_ = 0;
  int fail_map_ = 0;
  int pass_map_ = 0;  // cuMemMap calls to let through before fail_map_ applies
  int fail_unmap_ = 0;
  int fail_set_access_ = 0;
  int fail_copy_ = 0;
  int fail_host_copy_ = 0;
  int fail_event_record_ = 0;
  int fail_event_sync_ = 0;
  int fail_stream_wait_ = 0;
  int fail_event_query_ = 0;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_FAKE_DRIVER_H_

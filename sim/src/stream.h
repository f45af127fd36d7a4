// A stream: an in-order queue of device work executed by its own worker thread.
//
// Every operation gets a sequence number (1, 2, ...). An operation may carry dependencies on
// other streams' sequence numbers (cross-stream waits and the legacy default stream's implicit
// synchronization, see context.h); the worker waits for those before running it.
//
// Note [sticky errors]: once the owning context has a sticky error, device work (kernels,
// copies, memsets) is skipped instead of executed, as on a GPU whose context is lost; bookkeeping
// operations (event records, stream-ordered frees, host functions) still run so that waits and
// synchronizations complete and report the error.
//
// Thread safety: thread-safe. Shutdown() must not be called from the worker itself.
#ifndef MEMSIM_SRC_STREAM_H_
#define MEMSIM_SRC_STREAM_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "memvirt/common/mutex.h"

namespace memsim {

class Capture;
class Context;
class Stream;

struct StreamOp {
  std::function<void()> run;
  std::vector<std::pair<std::shared_ptr<Stream>, uint64_t>> deps;  // wait for (stream, seq)
  bool device_work = true;  // skipped when the context has a sticky error
};

class Stream {
 public:
  enum class Kind { kLegacyDefault, kPerThreadDefault, kUser };

  Stream(Context* ctx, Kind kind, unsigned flags, int priority);
  ~Stream();  // calls Shutdown()
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Appends op; returns its sequence number. Use Context::Enqueue for the default-stream
  // synchronization rules; this is the raw queue.
  uint64_t Enqueue(StreamOp op);

  // Blocks until operation `seq` (and everything before it) has completed.
  void WaitFor(uint64_t seq);
  bool IsDone(uint64_t seq);
  uint64_t last_enqueued();
  bool Idle();  // every enqueued operation completed

  // Drains the queue and joins the worker. Idempotent.
  void Shutdown();

  Context* context() const { return ctx_; }
  Kind kind() const { return kind_; }
  unsigned flags() const { return flags_; }
  int priority() const { return priority_; }
  uint64_t id() const { return id_; }
  // Blocking streams synchronize with the legacy default stream (CU_STREAM_NON_BLOCKING not set).
  bool blocking() const;

  // Launch attributes set on the stream (cuStreamSetAttribute); false when `id` was never set.
  bool GetAttribute(CUstreamAttrID id, CUstreamAttrValue* value);
  void SetAttribute(CUstreamAttrID id, const CUstreamAttrValue& value);

  // The capture sequence recording this stream's work (graph.h), or null.
  std::shared_ptr<Capture> capture();
  // Attaches `capture` unless one is attached already (then false).
  bool StartCapture(std::shared_ptr<Capture> capture);
  void EndCapture();
  // The same for a stream joining another stream's capture (Note [cross-stream capture] in
  // graph.h): the capture is registered by its origin stream only (Note [capture modes]).
  bool JoinCapture(std::shared_ptr<Capture> capture);
  void LeaveCapture();

 private:
  void WorkerLoop();

  Context* const ctx_;
  const Kind kind_;
  const unsigned flags_;
  const int priority_;
  const uint64_t id_;

  memvirt::sync::Mutex attributes_mu_;
  std::map<CUstreamAttrID, CUstreamAttrValue> attributes_ MEMVIRT_GUARDED_BY(attributes_mu_);

  memvirt::sync::Mutex capture_mu_;
  std::shared_ptr<Capture> capture_ MEMVIRT_GUARDED_BY(capture_mu_);

  std::mutex join_mu_;  // serializes Shutdown()
  std::mutex mu_;
  std::condition_variable cv_;  // queue changes and completions
  std::deque<StreamOp> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

// Whether the calling thread is a stream worker, i.e. runs device work or a host function
// (cuLaunchHostFunc / cuStreamAddCallback), which must not make CUDA API calls.
bool OnStreamWorker();

}  // namespace memsim

#endif  // MEMSIM_SRC_STREAM_H_

// A CUDA event: marks a point in a stream; completes when the stream reaches it.
//
// Record() captures (stream, sequence number) and enqueues a marker that timestamps the event
// when it executes. Query/Synchronize/waits refer to the most recent record at the time of the
// call, as the CUDA documentation specifies; an event never recorded counts as complete.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_EVENT_H_
#define MEMSIM_SRC_EVENT_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "ipc_event.h"

namespace memsim {

class Capture;
class Context;
class Stream;

class Event : public std::enable_shared_from_this<Event> {
 public:
  using Clock = std::chrono::steady_clock;

  // `shared`: the record state of an interprocess event (Note [ipc events] in ipc_event.h),
  // created with it or, when `imported`, opened from another process's handle.
  Event(Context* ctx, unsigned flags, std::shared_ptr<SharedEventState> shared = nullptr,
        bool imported = false)
      : ctx_(ctx), flags_(flags), shared_(std::move(shared)), imported_(imported) {}

  Context* context() const { return ctx_; }
  unsigned flags() const { return flags_; }
  bool timing_disabled() const { return (flags_ & CU_EVENT_DISABLE_TIMING) != 0; }
  const std::shared_ptr<SharedEventState>& shared() const { return shared_; }
  // Opened with cuIpcOpenEventHandle: its records are another process's.
  bool imported() const { return imported_; }

  // REQUIRES: stream belongs to ctx (the stream's context).
  void Record(Context* ctx, const std::shared_ptr<Stream>& stream);

  // The latest record as (stream, seq); stream is null when never recorded or when the latest
  // record was captured.
  std::pair<std::shared_ptr<Stream>, uint64_t> LastRecord();
  // A record on a capturing stream: until recorded again, the event is a captured event standing
  // for `nodes` of `capture` (Note [cross-stream capture] in graph.h).
  void RecordCaptured(const std::shared_ptr<Capture>& capture, std::vector<CUgraphNode> nodes);
  // The capture of a captured event (its nodes in *nodes), or null.
  std::shared_ptr<Capture> Captured(std::vector<CUgraphNode>* nodes);

  bool Complete();
  void Synchronize();
  // Milliseconds from `start` to this event. Errors per cuEventElapsedTime.
  CUresult ElapsedSince(Event& start, float* ms);

 private:
  std::optional<Clock::time_point> CompletedTime();

  Context* const ctx_;
  const unsigned flags_;
  const std::shared_ptr<SharedEventState> shared_;
  const bool imported_;
  std::mutex mu_;
  std::shared_ptr<Stream> stream_;
  uint64_t seq_ = 0;
  uint64_t generation_ = 0;
  std::optional<Clock::time_point> time_;  // of `generation_`, once executed
  std::weak_ptr<Capture> captured_;        // set while the latest record was captured
  std::vector<CUgraphNode> captured_nodes_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_EVENT_H_

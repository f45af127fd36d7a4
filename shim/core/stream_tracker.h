// Per-stream launch sequence numbers and their completion, learned from
// events recorded in batches.
//
// Every operation the shim lets through on a stream gets the next sequence
// number of that stream (Issue). Completion is known through events: one is
// recorded at most every `event_batch` operations, no more often than Note
// [event pacing] allows, and on demand when the caller must know that a
// specific sequence number has finished (WaitFor, Cover).
//
// Thread safety: not thread-safe; the owner (ShimCore) serializes every call
// with its mutex. Only the EnqueueWindow that BeginEnqueue() returns may be
// closed without that lock (Note [enqueue window]).
//
// Note [enqueue window]
//   A hook issues a sequence number under the core lock, releases the lock,
//   then calls the real driver to enqueue the work. Between the two, another
//   thread could record an event on the same stream that would not cover the
//   work yet. Each stream therefore counts operations entering that window
//   (BeginEnqueue, under the owner's lock: a plain increment) and leaving it
//   (the EnqueueWindow returned, closed by its destructor once the holder's
//   real call returned, from any thread: one atomic add); an event is only taken as
//   covering everything issued when the two counts are equal: batched
//   records and CoverAll() skip the stream while they differ, and on-demand
//   records wait (blocked, Note [window waits]) until they agree. Hold() does not wait: it hands
//   the caller a WindowWait to make without the owner's lock (Note [waits
//   outside the lock] in shim_core.h), as the window may stay open for as
//   long as the holder's driver call runs (a synchronous copy).
//
// Note [event pacing]
//   A batched event costs about as much host time as a launch (a driver
//   call: ~1-4 us), so one every `event_batch` launches would add a large
//   share of a launch to each launch when kernels are issued back to back.
//   Batched events only refresh completion knowledge early; whoever needs a
//   specific completion records on demand (Cover), and eviction covers every
//   stream before it waits (Evictor::EvictSome). So with pacing on
//   (`event_pace` = P > 0) a batched event is recorded only if the stream's
//   last one is at least P times the measured cost of a batched event
//   (poll + record, moving average) old, capped at kMaxEventIntervalNs: the
//   events then take at most about 1/P of the issuing thread's time, and
//   completion knowledge is at most that interval (plus the batch) stale.
//   The clock is read once per `event_batch` operations, never per Issue.
//
// Note [held events]
//   The owner may wait for an event without its lock (Note [waits outside the
//   lock] in shim_core.h). Meanwhile another caller may poll that event,
//   find it complete and recycle it, and a recycled event recorded again
//   would make the unlocked wait wait for later work (or for an event
//   recorded on another stream). So while any hold is out, completed events
//   are parked instead of reused; the last Unhold() (under the lock, after
//   the wait) makes them reusable.
//
// Note [completion is CUDA_SUCCESS]
//   Only CUDA_SUCCESS from cuEventQuery (or cuEventSynchronize) means the
//   work an event covers has completed. CUDA_ERROR_NOT_READY means it has
//   not; any other error (a sticky context error, an invalid handle) means
//   it is not known to have completed: a chunk it uses is never idle, so it
//   is never evicted or reused on that answer (the work may still be
//   reading it), and a wait for it returns the error. The first such error is
//   logged once.
#ifndef MEMVIRT_SHIM_CORE_STREAM_TRACKER_H_
#define MEMVIRT_SHIM_CORE_STREAM_TRACKER_H_

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shim/driver/driver.h"

namespace memvirt::shim {

// Note [window waits]
//   A thread that waits for a stream's enqueue window to close sleeps in the
//   kernel (std::atomic::wait, a futex) rather than yielding in a loop: the
//   holder's driver call may be a synchronous copy of many milliseconds, and
//   the waiter may be one holding the core lock (a last attempt, Cover()).
//   Closing a window must stay one atomic add on the launch path, so waiters
//   announce themselves in `waiters` and a closer notifies only when it sees
//   one. Both sides use sequentially consistent operations, in opposite
//   order (closer: add to `left`, then read `waiters`; waiter: add to
//   `waiters`, then read `left`): in their single total order either the
//   closer sees the waiter, or the waiter sees the new count, so no wake-up
//   is lost.
//
// The exits from one stream's enqueue window. Lives as long as its tracker;
// Leave() and WaitUntil() may be called from any thread without its owner's
// lock.
struct WindowExits {
  std::atomic<uint64_t> left{0};     // operations that left the window
  std::atomic<uint32_t> waiters{0};  // threads in WaitUntil()

  void Leave() {
    left.fetch_add(1, std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_seq_cst) != 0) left.notify_all();
  }
  // Blocks until `until` operations have left the window.
  void WaitUntil(uint64_t until);
};

// A stream's enqueue window held open (Note [enqueue window]): BeginEnqueue()
// opens it under the owner's lock; it closes (one release increment) when
// the holder destroys it or assigns another window to it, with or without
// that lock. Move-only, so every opened window is closed exactly once: a
// caller keeps it alive across its real driver call and cannot forget to
// close it. A default-constructed window holds nothing (the operation entered
// no window: it failed, or is captured into a graph).
class EnqueueWindow {
 public:
  EnqueueWindow() = default;
  EnqueueWindow(EnqueueWindow&& other) noexcept : exits_(std::exchange(other.exits_, nullptr)) {}
  EnqueueWindow& operator=(EnqueueWindow&& other) noexcept {
    if (this != &other) {
      Close();
      exits_ = std::exchange(other.exits_, nullptr);
    }
    return *this;
  }
  EnqueueWindow(const EnqueueWindow&) = delete;
  EnqueueWindow& operator=(const EnqueueWindow&) = delete;
  ~EnqueueWindow() { Close(); }

  bool open() const { return exits_ != nullptr; }
  // Closes the window now (the holder's driver call has returned); a no-op
  // if it is not open.
  void Close() {
    if (exits_ != nullptr) exits_->Leave();
    exits_ = nullptr;
  }

 private:
  friend class StreamTracker;
  explicit EnqueueWindow(WindowExits* exits) : exits_(exits) {}

  WindowExits* exits_ = nullptr;  // the stream's window exits
};

// A wait for the operations in a stream's enqueue window when it was taken
// to leave it (Note [enqueue window]). Wait() is made without the owner's
// lock, from any thread; it reads only the stream's atomic counter, which
// lives as long as the tracker. Default-constructed: nothing to wait for.
class WindowWait {
 public:
  WindowWait() = default;
  bool pending() const { return exits_ != nullptr; }
  // Blocks until those operations have left the window (Note [window waits]).
  void Wait() const {
    if (exits_ != nullptr) exits_->WaitUntil(until_);
  }

 private:
  friend class StreamTracker;
  WindowWait(WindowExits* exits, uint64_t until) : exits_(exits), until_(until) {}

  WindowExits* exits_ = nullptr;  // the stream's window exits
  uint64_t until_ = 0;            // window_entered when taken
};

class StreamTracker {
 public:
  // Monotonic nanoseconds (injectable for tests).
  using NowFn = int64_t (*)();
  static int64_t MonotonicNs();
  static constexpr int64_t kMaxEventIntervalNs = 1'000'000;

  // `event_pace`: 0 = a batched event every `event_batch` operations;
  // P > 0 = paced as in Note [event pacing].
  StreamTracker(const Driver* driver, uint32_t event_batch, uint32_t event_pace = 0,
                NowFn now = &MonotonicNs);
  ~StreamTracker();
  StreamTracker(const StreamTracker&) = delete;
  StreamTracker& operator=(const StreamTracker&) = delete;

  // Index of the stream `handle` as passed by the application. `per_thread`
  // is true for the _ptsz/_ptds entry points, where handle 0 means the calling
  // thread's per-thread default stream.
  uint32_t IndexOf(CUstream handle, bool per_thread) {
    // The one-entry cache, inline (every launch asks): last_handle_ is never
    // CU_STREAM_PER_THREAD nor CU_STREAM_LEGACY, and handle 0 of a _ptsz
    // call is the per-thread stream.
    if (handle == last_handle_ && last_index_ != kNoStream && !(per_thread && handle == nullptr)) {
      return last_index_;
    }
    return IndexOfSlow(handle, per_thread);
  }
  // Index of a stream created by the shim itself (its copy stream).
  uint32_t Adopt(CUstream handle);
  // The handle to pass to the driver for stream `index`.
  CUstream HandleOf(uint32_t index) const { return streams_[index]->handle; }

  // Next sequence number for an operation about to be enqueued on `index`.
  uint64_t Issue(uint32_t index);
  uint64_t issued(uint32_t index) const { return streams_[index]->issued; }

  // Enters the enqueue window of `index` (Note [enqueue window]); the
  // caller holds the result until its driver call has returned.
  [[nodiscard]] EnqueueWindow BeginEnqueue(uint32_t index) {
    State* s = streams_[index].get();
    ++s->window_entered;
    return EnqueueWindow(&s->window);
  }

  // True if operation `seq` of stream `index` is known complete (polls
  // events; Note [completion is CUDA_SUCCESS]).
  bool IsComplete(uint32_t index, uint64_t seq);
  // Makes sure an event covers `seq` and returns it (to cuStreamWaitEvent on).
  [[nodiscard]] CUresult Cover(uint32_t index, uint64_t seq, CUevent* event);
  // Blocks the host until `seq` of stream `index` has completed; the
  // driver's error if that cannot be established (the work then stays
  // not known complete).
  [[nodiscard]] CUresult WaitFor(uint32_t index, uint64_t seq);
  // Makes sure an event covers `seq` of stream `index` and returns it in
  // *event (null if `seq` is known complete), held for a wait made without
  // the owner's lock (Note [held events]) until Unhold(). The driver's
  // error if no event could be recorded. CUDA_ERROR_NOT_READY, with nothing
  // held and *window set, if the event would have to wait for another
  // thread's enqueue window to close: the caller waits for *window without
  // its lock and asks again (Note [enqueue window]).
  [[nodiscard]] CUresult Hold(uint32_t index, uint64_t seq, CUevent* event, WindowWait* window);
  // Ends `count` holds, one per non-null event Hold() handed out; once none
  // is left, the events they kept from reuse become reusable.
  void Unhold(uint32_t count);
  // Records an event on every stream with uncovered work, so that
  // IsComplete() can see work that has already finished. Never waits: a
  // stream whose enqueue window is open is skipped.
  void CoverAll();
  // Blocks until everything issued on every stream has completed.
  [[nodiscard]] CUresult WaitForAll();

  // The application destroys `handle`: pending events keep tracking what was
  // issued; a new stream reusing the handle gets a fresh index.
  void Retire(CUstream handle, bool per_thread);

  uint32_t num_streams() const { return static_cast<uint32_t>(streams_.size()); }
  uint64_t events_recorded() const { return events_recorded_; }
  // Current minimum age of a stream's last event before a batched one is
  // recorded (0 without pacing).
  int64_t event_interval_ns() const;

 private:
  struct State {
    CUstream handle = nullptr;
    uint64_t issued = 0;
    uint64_t covered = 0;    // highest seq covered by a recorded event
    uint64_t completed = 0;  // highest seq known complete
    uint32_t since_event = 0;
    int64_t last_batch_ns = 0;                         // clock at the last paced batched event
    std::deque<std::pair<uint64_t, CUevent>> pending;  // (covered seq, event)
    uint64_t window_entered = 0;                       // Note [enqueue window]
    WindowExits window;                                // left outside the lock
    bool WindowEmpty() const {
      return window.left.load(std::memory_order_acquire) == window_entered;
    }
    // REQUIRES the owner's lock (window_entered does not change meanwhile).
    void WaitWindowEmpty() { window.WaitUntil(window_entered); }
  };

  uint32_t NewState(CUstream handle);
  CUresult RecordNow(State* s);
  // RecordNow and Poll without their RelaxedCaptureMode scope: REQUIRES the
  // caller's (Note [relaxed driver sequences]).
  CUresult RecordEvent(State* s);
  void PollEvents(State* s);
  void RecordBatch(State* s);
  void Poll(State* s);
  void ReportQueryError(CUresult r);
  CUevent TakeEvent();
  uint32_t IndexOfSlow(CUstream handle, bool per_thread);

  const Driver* driver_;
  const uint32_t event_batch_;
  const uint32_t event_pace_;
  const NowFn now_;
  int64_t batch_cost_ns_ = 0;  // moving average of one batched event (poll + record)
  std::vector<std::unique_ptr<State>> streams_;
  std::unordered_map<CUstream, uint32_t> by_handle_;
  CUstream last_handle_ = nullptr;
  uint32_t last_index_ = kNoStream;
  std::vector<CUevent> free_events_;
  uint32_t holds_ = 0;                  // Note [held events]
  std::vector<CUevent> parked_events_;  // completed while holds_ > 0
  uint64_t events_recorded_ = 0;
  CUresult last_query_error_ = CUDA_SUCCESS;
  bool query_error_logged_ = false;
  const uint64_t generation_;

  static constexpr uint32_t kNoStream = 0xffffffffu;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_STREAM_TRACKER_H_

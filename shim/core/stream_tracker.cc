#include "shim/core/stream_tracker.h"

#include <time.h>

#include <algorithm>

#include "shim/core/log.h"
#include "shim/core/relaxed_capture_mode.h"

namespace memvirt::shim {
namespace {

std::atomic<uint64_t> g_generation{1};

// The calling thread's per-thread default stream, per tracker instance.
struct PerThreadSlot {
  uint64_t generation = 0;
  uint32_t index = 0;
};
thread_local PerThreadSlot t_per_thread;

}  // namespace

void WindowExits::WaitUntil(uint64_t until) {
  uint64_t seen = left.load(std::memory_order_seq_cst);
  if (seen >= until) return;
  waiters.fetch_add(1, std::memory_order_seq_cst);  // Note [window waits]
  while ((seen = left.load(std::memory_order_seq_cst)) < until) {
    left.wait(seen, std::memory_order_seq_cst);
  }
  waiters.fetch_sub(1, std::memory_order_release);
}

int64_t StreamTracker::MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

StreamTracker::StreamTracker(const Driver* driver, uint32_t event_batch, uint32_t event_pace,
                             NowFn now)
    : driver_(driver),
      event_batch_(event_batch == 0 ? 1 : event_batch),
      event_pace_(event_pace),
      now_(now != nullptr ? now : &MonotonicNs),
      generation_(g_generation.fetch_add(1)) {}

int64_t StreamTracker::event_interval_ns() const {
  if (event_pace_ == 0) return 0;
  return std::min(batch_cost_ns_ * event_pace_, kMaxEventIntervalNs);
}

StreamTracker::~StreamTracker() {
  for (auto& s : streams_) {
    for (auto& [seq, event] : s->pending) driver_->cuEventDestroy_v2(event);
  }
  for (CUevent e : free_events_) driver_->cuEventDestroy_v2(e);
  for (CUevent e : parked_events_) driver_->cuEventDestroy_v2(e);
}

uint32_t StreamTracker::NewState(CUstream handle) {
  auto state = std::make_unique<State>();
  state->handle = handle;
  streams_.push_back(std::move(state));
  return static_cast<uint32_t>(streams_.size() - 1);
}

uint32_t StreamTracker::IndexOfSlow(CUstream handle, bool per_thread) {
  if (handle == CU_STREAM_PER_THREAD || (per_thread && handle == nullptr)) {
    if (t_per_thread.generation != generation_) {
      t_per_thread.generation = generation_;
      t_per_thread.index = NewState(CU_STREAM_PER_THREAD);
    }
    return t_per_thread.index;
  }
  if (handle == CU_STREAM_LEGACY) handle = nullptr;  // one legacy default stream
  if (handle == last_handle_ && last_index_ != kNoStream) return last_index_;
  auto [it, inserted] = by_handle_.try_emplace(handle, 0);
  if (inserted) it->second = NewState(handle);
  last_handle_ = handle;
  last_index_ = it->second;
  return it->second;
}

uint32_t StreamTracker::Adopt(CUstream handle) {
  uint32_t index = NewState(handle);
  by_handle_[handle] = index;
  return index;
}

CUevent StreamTracker::TakeEvent() {
  if (!free_events_.empty()) {
    CUevent e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (driver_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

CUresult StreamTracker::RecordNow(State* s) {
  RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
  return RecordEvent(s);
}

CUresult StreamTracker::RecordEvent(State* s) {
  CUevent e = TakeEvent();
  if (e == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r = driver_->cuEventRecord(e, s->handle);
  if (r != CUDA_SUCCESS) {
    free_events_.push_back(e);
    return r;
  }
  ++events_recorded_;
  s->covered = s->issued;
  s->since_event = 0;
  s->pending.emplace_back(s->issued, e);
  return CUDA_SUCCESS;
}

uint64_t StreamTracker::Issue(uint32_t index) {
  State* s = streams_[index].get();
  if (++s->since_event >= event_batch_ && s->covered < s->issued && s->WindowEmpty()) {
    RecordBatch(s);
  }
  return ++s->issued;
}

void StreamTracker::RecordBatch(State* s) {
  s->since_event = 0;  // whatever happens below, look again a batch later
  const bool paced = event_pace_ != 0;
  const int64_t start = paced ? now_() : 0;
  if (paced && start - s->last_batch_ns < event_interval_ns()) return;  // Note [event pacing]
  CUresult r;
  {
    RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
    PollEvents(s);                        // recycle finished batches: pending events stay bounded
    r = RecordEvent(s);
  }
  if (r != CUDA_SUCCESS || !paced) return;
  s->last_batch_ns = start;
  const int64_t cost = std::max<int64_t>(now_() - start, 0);
  batch_cost_ns_ += (cost - batch_cost_ns_) / 8;
}

void StreamTracker::Poll(State* s) {
  if (s->pending.empty()) return;
  RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
  PollEvents(s);
}

void StreamTracker::PollEvents(State* s) {
  while (!s->pending.empty()) {
    auto [seq, event] = s->pending.front();
    const CUresult r = driver_->cuEventQuery(event);
    if (r != CUDA_SUCCESS) {  // Note [completion is CUDA_SUCCESS]
      if (r != CUDA_ERROR_NOT_READY) ReportQueryError(r);
      return;
    }
    s->completed = seq;
    s->pending.pop_front();
    (holds_ > 0 ? parked_events_ : free_events_).push_back(event);  // Note [held events]
  }
}

bool StreamTracker::IsComplete(uint32_t index, uint64_t seq) {
  State* s = streams_[index].get();
  if (s->completed >= seq) return true;
  if (s->covered < seq) return false;
  Poll(s);
  return s->completed >= seq;
}

CUresult StreamTracker::Cover(uint32_t index, uint64_t seq, CUevent* event) {
  State* s = streams_[index].get();
  if (s->covered < seq) {
    s->WaitWindowEmpty();
    CUresult r = RecordNow(s);
    if (r != CUDA_SUCCESS) return r;
  }
  for (auto& [covered, e] : s->pending) {
    if (covered >= seq) {
      *event = e;
      return CUDA_SUCCESS;
    }
  }
  *event = nullptr;  // already complete
  return CUDA_SUCCESS;
}

CUresult StreamTracker::Hold(uint32_t index, uint64_t seq, CUevent* event, WindowWait* window) {
  *event = nullptr;
  if (IsComplete(index, seq)) return CUDA_SUCCESS;
  State* s = streams_[index].get();
  if (s->covered < seq && !s->WindowEmpty()) {  // Cover() would wait for it
    *window = WindowWait(&s->window, s->window_entered);
    return CUDA_ERROR_NOT_READY;
  }
  const CUresult r = Cover(index, seq, event);
  if (r == CUDA_SUCCESS && *event != nullptr) ++holds_;
  return r;
}

void StreamTracker::Unhold(uint32_t count) {
  holds_ -= std::min(count, holds_);
  if (holds_ > 0) return;
  free_events_.insert(free_events_.end(), parked_events_.begin(), parked_events_.end());
  parked_events_.clear();
}

CUresult StreamTracker::WaitFor(uint32_t index, uint64_t seq) {
  State* s = streams_[index].get();
  if (s->completed >= seq) return CUDA_SUCCESS;
  CUevent event = nullptr;
  CUresult r = Cover(index, seq, &event);
  if (r != CUDA_SUCCESS) return r;
  if (event != nullptr) {
    RelaxedCaptureMode relaxed(driver_);  // Note [relaxed driver sequences]
    r = driver_->cuEventSynchronize(event);
    if (r != CUDA_SUCCESS) {
      // Note [completion is CUDA_SUCCESS]: the work is not known complete.
      MEMSHIM_LOG(kWarn, "cuEventSynchronize failed (%d)", r);
      return r;
    }
  }
  Poll(s);
  if (s->completed < seq) return last_query_error_;  // the query of a waited-for event failed
  return CUDA_SUCCESS;
}

void StreamTracker::ReportQueryError(CUresult r) {
  last_query_error_ = r;
  if (query_error_logged_) return;
  query_error_logged_ = true;
  MEMSHIM_LOG(kError,
              "cuEventQuery failed (%d): the work it covers is not known complete, so the "
              "memory it uses is kept (logged once)",
              r);
}

void StreamTracker::CoverAll() {
  for (auto& s : streams_) {
    if (s->covered < s->issued && s->WindowEmpty()) {
      CUevent ignored;
      // Opportunistic: a stream whose record fails is covered on demand later.
      (void)Cover(static_cast<uint32_t>(&s - &streams_[0]), s->issued, &ignored);
    }
  }
}

CUresult StreamTracker::WaitForAll() {
  CUresult result = CUDA_SUCCESS;
  for (uint32_t i = 0; i < streams_.size(); ++i) {
    CUresult r = WaitFor(i, streams_[i]->issued);
    if (r != CUDA_SUCCESS) result = r;
  }
  return result;
}

void StreamTracker::Retire(CUstream handle, bool per_thread) {
  (void)per_thread;  // a per-thread default stream is never destroyed
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) return;
  auto it = by_handle_.find(handle);
  if (it == by_handle_.end()) return;
  State* s = streams_[it->second].get();
  if (s->covered < s->issued) {
    s->WaitWindowEmpty();
    if (RecordNow(s) != CUDA_SUCCESS) s->completed = s->issued;
  }
  s->handle = nullptr;  // never used for new work again
  by_handle_.erase(it);
  if (last_handle_ == handle) last_index_ = kNoStream;
}

}  // namespace memvirt::shim

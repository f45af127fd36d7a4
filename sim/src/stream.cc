#include "stream.h"

#include <atomic>

#include "capture_mode.h"
#include "context.h"
#include "cuda_api.h"

namespace memsim {

namespace {
std::atomic<uint64_t> g_next_stream_id{1};
thread_local bool t_stream_worker = false;
}  // namespace

bool OnStreamWorker() { return t_stream_worker; }

Stream::Stream(Context* ctx, Kind kind, unsigned flags, int priority)
    : ctx_(ctx),
      kind_(kind),
      flags_(flags),
      priority_(priority),
      id_(g_next_stream_id.fetch_add(1, std::memory_order_relaxed)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

Stream::~Stream() { Shutdown(); }

bool Stream::blocking() const {
  return kind_ != Kind::kLegacyDefault && (flags_ & CU_STREAM_NON_BLOCKING) == 0;
}

std::shared_ptr<Capture> Stream::capture() {
  memvirt::sync::MutexLock lock(&capture_mu_);
  return capture_;
}

bool Stream::StartCapture(std::shared_ptr<Capture> capture) {
  memvirt::sync::MutexLock lock(&capture_mu_);
  if (capture_ != nullptr) return false;
  RegisterCapture(capture);  // Note [capture modes]
  capture_ = std::move(capture);
  return true;
}

void Stream::EndCapture() {
  memvirt::sync::MutexLock lock(&capture_mu_);
  if (capture_ != nullptr) UnregisterCapture(capture_.get());
  capture_ = nullptr;
}

bool Stream::JoinCapture(std::shared_ptr<Capture> capture) {
  memvirt::sync::MutexLock lock(&capture_mu_);
  if (capture_ != nullptr) return false;
  capture_ = std::move(capture);
  return true;
}

void Stream::LeaveCapture() {
  memvirt::sync::MutexLock lock(&capture_mu_);
  capture_ = nullptr;
}

uint64_t Stream::Enqueue(StreamOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(op));
  const uint64_t seq = ++enqueued_;
  cv_.notify_all();
  return seq;
}

void Stream::WaitFor(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= seq; });
}

bool Stream::IsDone(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= seq;
}

uint64_t Stream::last_enqueued() {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueued_;
}

bool Stream::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ == enqueued_;
}

void Stream::Shutdown() {
  std::lock_guard<std::mutex> join_lock(join_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void Stream::WorkerLoop() {
  t_stream_worker = true;
  for (;;) {
    StreamOp op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and drained
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    for (auto& [stream, seq] : op.deps) stream->WaitFor(seq);
    op.deps.clear();
    if (!op.device_work || ctx_->sticky_error() == CUDA_SUCCESS) op.run();
    op.run = nullptr;  // release captures before signalling completion
    std::lock_guard<std::mutex> lock(mu_);
    ++completed_;
    cv_.notify_all();
  }
}

bool Stream::GetAttribute(CUstreamAttrID id, CUstreamAttrValue* value) {
  memvirt::sync::MutexLock lock(&attributes_mu_);
  auto it = attributes_.find(id);
  if (it == attributes_.end()) return false;
  *value = it->second;
  return true;
}

void Stream::SetAttribute(CUstreamAttrID id, const CUstreamAttrValue& value) {
  memvirt::sync::MutexLock lock(&attributes_mu_);
  attributes_[id] = value;
}

}  // namespace memsim

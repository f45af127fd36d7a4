#include "event.h"

#include "context.h"
#include "stream.h"

namespace memsim {

void Event::Record(Context* ctx, const std::shared_ptr<Stream>& stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t generation = ++generation_;
  time_.reset();
  StreamOp op;
  op.device_work = false;
  std::weak_ptr<Event> self = weak_from_this();
  const uint64_t shared_generation = shared_ ? shared_->BeginRecord() : 0;
  op.run = [self, generation, shared = shared_, shared_generation] {
    if (shared) shared->Completed(shared_generation);  // Note [ipc events]
    if (auto ev = self.lock()) {
      std::lock_guard<std::mutex> lock(ev->mu_);
      if (ev->generation_ == generation) ev->time_ = Clock::now();
    }
  };
  // The marker cannot run its body before we release mu_, so stream_/seq_ are set first.
  seq_ = ctx->Enqueue(stream, std::move(op));
  stream_ = stream;
  captured_.reset();
  captured_nodes_.clear();
}

void Event::RecordCaptured(const std::shared_ptr<Capture>& capture,
                           std::vector<CUgraphNode> nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  time_.reset();
  stream_ = nullptr;
  seq_ = 0;
  captured_ = capture;
  captured_nodes_ = std::move(nodes);
}

std::shared_ptr<Capture> Event::Captured(std::vector<CUgraphNode>* nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto capture = captured_.lock();
  if (capture != nullptr) *nodes = captured_nodes_;
  return capture;
}

std::pair<std::shared_ptr<Stream>, uint64_t> Event::LastRecord() {
  std::lock_guard<std::mutex> lock(mu_);
  return {stream_, seq_};
}

bool Event::Complete() {
  if (imported_) return shared_->Complete();
  auto [stream, seq] = LastRecord();
  return stream == nullptr || stream->IsDone(seq);
}

void Event::Synchronize() {
  if (imported_) return shared_->WaitFor(shared_->recorded());
  auto [stream, seq] = LastRecord();
  if (stream != nullptr) stream->WaitFor(seq);
}

std::optional<Event::Clock::time_point> Event::CompletedTime() {
  std::lock_guard<std::mutex> lock(mu_);
  return time_;
}

CUresult Event::ElapsedSince(Event& start, float* ms) {
  if (timing_disabled() || start.timing_disabled()) return CUDA_ERROR_INVALID_HANDLE;
  if (start.LastRecord().first == nullptr || LastRecord().first == nullptr) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!start.Complete() || !Complete()) return CUDA_ERROR_NOT_READY;
  auto t0 = start.CompletedTime();
  auto t1 = CompletedTime();
  if (!t0 || !t1) return CUDA_ERROR_NOT_READY;  // a newer record is still pending
  *ms = std::chrono::duration<float, std::milli>(*t1 - *t0).count();
  return CUDA_SUCCESS;
}

}  // namespace memsim

#include "context.h"

#include <algorithm>

namespace memsim {

namespace {
std::atomic<uint64_t> g_next_context_id{1};
}  // namespace

Context::Context(Device* device, unsigned flags, bool primary)
    : device_(device),
      flags_(flags),
      primary_(primary),
      id_(g_next_context_id.fetch_add(1, std::memory_order_relaxed)) {}

Context::~Context() { Shutdown(); }

void Context::SetStickyError(CUresult error) {
  CUresult expected = CUDA_SUCCESS;
  sticky_.compare_exchange_strong(expected, error, std::memory_order_acq_rel);
}

std::shared_ptr<Stream> Context::LegacyStream() {
  memvirt::sync::MutexLock lock(&mu_);
  if (!legacy_) legacy_ = std::make_shared<Stream>(this, Stream::Kind::kLegacyDefault, 0, 0);
  return legacy_;
}

std::shared_ptr<Stream> Context::PerThreadStream() {
  memvirt::sync::MutexLock lock(&mu_);
  auto& s = per_thread_[std::this_thread::get_id()];
  if (!s) s = std::make_shared<Stream>(this, Stream::Kind::kPerThreadDefault, 0, 0);
  return s;
}

std::shared_ptr<Stream> Context::CreateStream(unsigned flags, int priority) {
  auto s = std::make_shared<Stream>(this, Stream::Kind::kUser, flags, priority);
  memvirt::sync::MutexLock lock(&mu_);
  user_streams_.push_back(s);
  return s;
}

void Context::DestroyStream(const std::shared_ptr<Stream>& stream) {
  {
    memvirt::sync::MutexLock lock(&mu_);
    user_streams_.erase(std::remove(user_streams_.begin(), user_streams_.end(), stream),
                        user_streams_.end());
  }
  stream->Shutdown();
}

uint64_t Context::Enqueue(const std::shared_ptr<Stream>& stream, StreamOp op) {
  std::lock_guard<std::mutex> submit(submit_mu_);
  if (stream->kind() == Stream::Kind::kLegacyDefault) {
    std::vector<std::shared_ptr<Stream>> others;
    {
      memvirt::sync::MutexLock lock(&mu_);
      for (auto& [tid, s] : per_thread_) others.push_back(s);
      for (auto& s : user_streams_) others.push_back(s);
    }
    for (auto& s : others) {
      if (!s->blocking()) continue;
      const uint64_t last = s->last_enqueued();
      if (!s->IsDone(last)) op.deps.emplace_back(s, last);
    }
  } else if (stream->blocking()) {
    std::shared_ptr<Stream> legacy;
    {
      memvirt::sync::MutexLock lock(&mu_);
      legacy = legacy_;
    }
    if (legacy) {
      const uint64_t last = legacy->last_enqueued();
      if (!legacy->IsDone(last)) op.deps.emplace_back(legacy, last);
    }
  }
  return stream->Enqueue(std::move(op));
}

std::vector<std::shared_ptr<Stream>> Context::Streams() {
  std::vector<std::shared_ptr<Stream>> all;
  memvirt::sync::MutexLock lock(&mu_);
  if (legacy_) all.push_back(legacy_);
  for (auto& [tid, s] : per_thread_) all.push_back(s);
  for (auto& s : user_streams_) all.push_back(s);
  return all;
}

void Context::Synchronize() {
  for (auto& s : Streams()) s->WaitFor(s->last_enqueued());
}

void Context::Shutdown() {
  for (auto& s : Streams()) s->Shutdown();
}

void Context::Reset() {
  Shutdown();
  memvirt::sync::MutexLock lock(&mu_);
  legacy_.reset();
  per_thread_.clear();
  user_streams_.clear();
  peers_.clear();
  sticky_.store(CUDA_SUCCESS, std::memory_order_release);
  blocking_captures_.store(0, std::memory_order_release);
}

bool Context::EnablePeer(const Context& peer) {
  memvirt::sync::MutexLock lock(&mu_);
  return peers_.insert(peer.id()).second;
}

bool Context::DisablePeer(const Context& peer) {
  memvirt::sync::MutexLock lock(&mu_);
  return peers_.erase(peer.id()) > 0;
}

}  // namespace memsim

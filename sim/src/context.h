// A CUDA context: one device, its streams (including the default streams) and the sticky
// error state.
//
// Note [legacy default stream]: per the CUDA documentation, work submitted to the legacy
// default stream (the NULL stream without per-thread semantics, or CU_STREAM_LEGACY) first
// waits for all prior work in the context's blocking streams, and work submitted to a blocking
// stream first waits for prior legacy-default-stream work. Streams created with
// CU_STREAM_NON_BLOCKING take part in neither rule; the per-thread default stream is blocking.
// Enqueue() implements this by adding (stream, last sequence number) dependencies under one
// context-wide submission mutex.
//
// Ownership: contexts live in the driver's handle table; streams are owned by their context
// (and by the handle table for user streams) and are shut down when the context is destroyed.
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_CONTEXT_H_
#define MEMSIM_SRC_CONTEXT_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cuda_api.h"
#include "memvirt/common/mutex.h"
#include "stream.h"

namespace memsim {

class Device;

class Context {
 public:
  Context(Device* device, unsigned flags, bool primary);
  ~Context();  // Shutdown()
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device* device() const { return device_; }
  unsigned flags() const { return flags_.load(std::memory_order_relaxed); }
  void set_flags(unsigned flags) { flags_.store(flags, std::memory_order_relaxed); }
  bool primary() const { return primary_; }
  uint64_t id() const { return id_; }
  CUcontext handle() { return reinterpret_cast<CUcontext>(this); }

  CUresult sticky_error() const { return sticky_.load(std::memory_order_acquire); }
  // The first error sticks; later ones are ignored.
  void SetStickyError(CUresult error);

  std::shared_ptr<Stream> LegacyStream();
  std::shared_ptr<Stream> PerThreadStream();  // of the calling thread
  std::shared_ptr<Stream> CreateStream(unsigned flags, int priority);
  // Removes a user stream from the context and shuts it down (waits for its work).
  void DestroyStream(const std::shared_ptr<Stream>& stream);

  // Enqueues on `stream` with the default-stream synchronization rules; returns the sequence
  // number. REQUIRES: stream belongs to this context.
  uint64_t Enqueue(const std::shared_ptr<Stream>& stream, StreamOp op);

  // Every stream of the context that exists now (default streams included).
  std::vector<std::shared_ptr<Stream>> Streams();
  // Number of blocking streams now capturing (Note [capture] in graph.h): while it is non-zero
  // the legacy default stream may not be used (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  int blocking_captures() const { return blocking_captures_.load(std::memory_order_acquire); }
  void AddBlockingCaptures(int delta) { blocking_captures_.fetch_add(delta); }

  // Peer access from this context to memory of `peer`'s device (cuCtxEnablePeerAccess).
  // Enable: false when already enabled; Disable: false when not enabled.
  bool EnablePeer(const Context& peer);
  bool DisablePeer(const Context& peer);

  // Waits until every stream of the context is idle (cuCtxSynchronize).
  void Synchronize();
  // Drains and stops all streams. Idempotent.
  void Shutdown();
  // Shutdown(), then forgets the streams, peers and sticky error: the context is as new (a
  // primary context made inactive by release or reset; its handle stays valid).
  void Reset();

 private:
  Device* const device_;
  std::atomic<unsigned> flags_;
  const bool primary_;
  const uint64_t id_;
  std::atomic<CUresult> sticky_{CUDA_SUCCESS};
  std::atomic<int> blocking_captures_{0};

  std::mutex submit_mu_;     // serializes dependency computation + enqueue
  memvirt::sync::Mutex mu_;  // guards the stream lists and the peers
  std::shared_ptr<Stream> legacy_ MEMVIRT_GUARDED_BY(mu_);
  std::map<std::thread::id, std::shared_ptr<Stream>> per_thread_ MEMVIRT_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Stream>> user_streams_ MEMVIRT_GUARDED_BY(mu_);
  std::set<uint64_t> peers_ MEMVIRT_GUARDED_BY(mu_);  // context ids
};

}  // namespace memsim

#endif  // MEMSIM_SRC_CONTEXT_H_

#include "daemon/server/client_stream_service.h"

#include <deque>
#include <optional>

#include "absl/synchronization/mutex.h"
#include "daemon/core/mutex_lock.h"
#include "daemon/server/client_message.h"
#include "daemon/server/proto_convert.h"
#include "glog/logging.h"

namespace memvirt::daemon {
namespace {

// One client stream. Reads are processed one at a time (the next read starts after the
// previous message was handled); writes come from NodeState through DirectiveSink and are
// queued, one in flight at a time.
//
// Note [stream lifetime]
// The registration lives exactly as long as the stream. When the read side ends (the client
// closed it, or its process died and the kernel closed the socket), the reactor unregisters
// first, so NodeState never calls the sink again, then finishes the call once no write is in
// flight. gRPC calls OnDone() last, which deletes the reactor.
class ClientStreamReactor final
    : public grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage>,
      public DirectiveSink {
 public:
  ClientStreamReactor(NodeState* node, PidWatcher* pids, absl::StatusOr<PeerCredentials> peer,
                      uint32_t hint_interval_ms)
      : node_(node), pids_(pids), peer_(std::move(peer)), hint_interval_ms_(hint_interval_ms) {
    if (!peer_.ok()) {
      LOG(WARNING) << "stream refused: " << peer_.status();
      End(ToGrpcStatus(peer_.status()));
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      End(grpc::Status::OK);
      return;
    }
    if (absl::Status s = Handle(in_); !s.ok()) {
      LOG(WARNING) << "pid " << peer_->pid << ": ending stream: " << s;
      End(ToGrpcStatus(s));
      return;
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    const v1::DaemonMessage* next = nullptr;
    bool finish = false;
    {
      MutexLock lock(&mu_);
      out_.pop_front();
      if (ok && !finishing_ && !out_.empty()) {
        next = &out_.front();
      } else {
        writing_ = false;
        finish = finishing_ && !finished_;
        finished_ = finished_ || finish;
      }
    }
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(final_status_);
  }

  void OnDone() override {
    // gRPC orders OnDone after every other reaction; taking the lock once makes that order
    // visible to ThreadSanitizer, which cannot see gRPC's own synchronization.
    { MutexLock lock(&mu_); }
    delete this;
  }

  // DirectiveSink (called with NodeState's lock held: only enqueue).
  void OnRegistered(const RegisterResult& result) override {
    v1::DaemonMessage m;
    ToProto(result, hint_interval_ms_, m.mutable_registered());
    Enqueue(std::move(m));
  }
  void OnDirective(const Directive& d) override {
    v1::DaemonMessage m;
    ToProto(d, m.mutable_directive());
    Enqueue(std::move(m));
  }
  void OnGpusAdded(const std::vector<GpuBudget>& budgets) override {
    v1::DaemonMessage m;
    for (const GpuBudget& b : budgets) ToProto(b, m.mutable_gpus_added()->add_budgets());
    Enqueue(std::move(m));
  }

 private:
  absl::Status Handle(const v1::ClientMessage& m) {
    const bool was_registered = id_ != 0;
    std::optional<v1::DaemonMessage> reply;
    absl::Status s = ApplyClientMessage(*node_, *peer_, this, m, id_, reply);
    if (reply.has_value()) Enqueue(std::move(*reply));
    if (s.ok() && !was_registered && id_ != 0 && pids_ != nullptr) {
      // Note [pidfd] in daemon/server/pid_watcher.h
      if (absl::Status w = pids_->Watch(id_, peer_->pid); !w.ok()) {
        LOG(WARNING) << "pid " << peer_->pid << ": exit detection by socket only: " << w;
      }
    }
    return s;
  }

  void Enqueue(v1::DaemonMessage m) {
    const v1::DaemonMessage* start = nullptr;
    {
      MutexLock lock(&mu_);
      if (finishing_) return;
      out_.push_back(std::move(m));  // deque: references to queued elements stay valid
      if (!writing_) {
        writing_ = true;
        start = &out_.front();
      }
    }
    if (start != nullptr) StartWrite(start);
  }

  // Ends the stream (Note [stream lifetime]).
  void End(grpc::Status status) {
    if (id_ != 0) {
      if (pids_ != nullptr) pids_->Unwatch(id_);
      node_->Unregister(id_);
      id_ = 0;
    }
    bool finish = false;
    {
      MutexLock lock(&mu_);
      finishing_ = true;
      final_status_ = std::move(status);
      finish = !writing_ && !finished_;
      finished_ = finished_ || finish;
    }
    if (finish) Finish(final_status_);
  }

  NodeState* const node_;
  PidWatcher* const pids_;
  const absl::StatusOr<PeerCredentials> peer_;
  const uint32_t hint_interval_ms_;
  v1::ClientMessage in_;
  ClientId id_ = 0;  // Touched only by the read path (one reaction at a time).

  absl::Mutex mu_;
  std::deque<v1::DaemonMessage> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_;  // Written before finishing_ is set; read after.
};

}  // namespace

grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage>* ClientStreamService::Attach(
    grpc::CallbackServerContext* context) {
  return new ClientStreamReactor(node_, pids_, peers_->Lookup(context->peer()), hint_interval_ms_);
}

}  // namespace memvirt::daemon

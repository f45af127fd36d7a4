#include "memvirt/client.h"

#include <sys/stat.h>

#include <cstdlib>
#include <deque>
#include <map>
#include <set>
#include <thread>

#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "memvirt/common/mutex.h"
#include "memvirt/protocol/convert.h"
#include "memvirt/v1/memvirt.grpc.pb.h"

namespace memvirt::client {
namespace {

using sync::CondVar;
using sync::Mutex;
using sync::MutexLock;

constexpr char kDefaultSocket[] = "/run/memvirt/memvirtd.sock";
using protocol::FromProto;
using protocol::kFirstVersionAddingGpus;
using protocol::kProtocolVersion;
using protocol::ToProto;

using Stream = grpc::ClientReaderWriter<v1::ClientMessage, v1::DaemonMessage>;

// Note [connection thread]
// One thread owns the connection: it connects, registers, then reads directives until the
// stream breaks, and reconnects with backoff. A second thread per stream drains the outgoing
// queue, because a sync stream allows one reader and one writer concurrently. The callbacks
// run on the connection thread.
class ClientImpl final : public Client {
 public:
  explicit ClientImpl(Options o) : options_(std::move(o)) {
    if (options_.socket_path.empty()) {
      const char* env = std::getenv("MEMSHIM_DAEMON_SOCKET");
      options_.socket_path = (env != nullptr && *env != '\0') ? env : kDefaultSocket;
    }
    for (const GpuClaim& g : options_.gpus) last_usage_[g.gpu_uuid].gpu_uuid = g.gpu_uuid;
    claims_ = std::move(options_.gpus);
    thread_ = std::thread([this] { Run(); });
  }
  ~ClientImpl() override { Close(); }

  State state() const override {
    MutexLock lock(&mu_);
    return state_;
  }

  bool WaitConnected(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock lock(&mu_);
    while (state_ != State::kConnected) {
      if (!cv_.WaitUntil(&mu_, deadline)) return state_ == State::kConnected;
    }
    return true;
  }

  std::optional<uint64_t> Budget(const std::string& gpu_uuid) const override {
    MutexLock lock(&mu_);
    auto it = budgets_.find(gpu_uuid);
    if (it == budgets_.end()) return std::nullopt;
    return it->second;
  }

  bool BudgetPending(const std::string& gpu_uuid) const override {
    MutexLock lock(&mu_);
    return pending_.count(gpu_uuid) != 0;
  }

  void AddGpu(GpuClaim claim) override {
    MutexLock lock(&mu_);
    for (const GpuClaim& c : claims_) {
      if (c.gpu_uuid == claim.gpu_uuid) return;
    }
    last_usage_[claim.gpu_uuid].gpu_uuid = claim.gpu_uuid;
    claims_.push_back(claim);
    if (state_ != State::kConnected || daemon_version_ < kFirstVersionAddingGpus) return;
    v1::ClientMessage m;
    ToProto(std::vector<GpuClaim>{claim}, m.mutable_add_gpus());
    pending_.insert(claim.gpu_uuid);
    adding_.push_back(claim.gpu_uuid);
    Enqueue(std::move(m), /*droppable=*/false);
  }

  pid_t daemon_pid() const override {
    MutexLock lock(&mu_);
    return daemon_pid_;
  }

  uint64_t registrations() const override {
    MutexLock lock(&mu_);
    return registrations_;
  }

  void SendHints(HintBatch batch) override {
    v1::ClientMessage m;
    ToProto(batch, m.mutable_hints());
    MutexLock lock(&mu_);
    for (const GpuUsage& u : batch.usage) RememberUsage(u);
    if (state_ != State::kConnected) return;
    Enqueue(std::move(m), /*droppable=*/true);
  }

  void Ack(uint64_t directive_id, bool complied, std::optional<GpuUsage> usage) override {
    if (directive_id == 0) return;  // Informational (Note [initial budgets]).
    v1::ClientMessage m;
    ToProto(protocol::DirectiveAck{directive_id, complied, usage}, m.mutable_ack());
    MutexLock lock(&mu_);
    if (usage.has_value()) RememberUsage(*usage);
    if (state_ != State::kConnected) return;
    Enqueue(std::move(m), /*droppable=*/false);
  }

  bool PollDirective(Directive* out) override {
    MutexLock lock(&mu_);
    if (polled_.empty()) return false;
    *out = std::move(polled_.front());
    polled_.pop_front();
    return true;
  }

  void Close() override {
    {
      MutexLock lock(&mu_);
      if (stop_) return;
      stop_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    cv_.NotifyAll();
    if (thread_.joinable()) thread_.join();
    SetState(State::kClosed, /*notify=*/false);  // Callbacks run only on the client thread.
  }

 private:
  void RememberUsage(const GpuUsage& u) MEMVIRT_REQUIRES(mu_) {
    if (last_usage_.count(u.gpu_uuid) > 0) last_usage_[u.gpu_uuid] = u;
  }

  void Enqueue(v1::ClientMessage m, bool droppable) MEMVIRT_REQUIRES(mu_) {
    if (droppable && outbox_.size() >= options_.max_queued_messages) return;
    outbox_.push_back(std::move(m));
    cv_.NotifyAll();
  }

  void SetState(State s, bool notify = true) {
    {
      MutexLock lock(&mu_);
      if (state_ == s) return;
      state_ = s;
    }
    cv_.NotifyAll();
    if (notify && options_.on_state) options_.on_state(s);
  }

  void Deliver(const Directive& d) {
    if (options_.on_directive) {
      options_.on_directive(d);
      return;
    }
    MutexLock lock(&mu_);
    polled_.push_back(d);
  }

  v1::ClientMessage RegisterMessage() {
    protocol::Registration r;
    r.protocol_version = kProtocolVersion;
    r.process_name = options_.process_name;
    r.host_demand_bytes = options_.host_demand_bytes;
    {
      MutexLock lock(&mu_);
      r.gpus = claims_;
      for (const auto& [uuid, u] : last_usage_) r.usage.push_back(u);
    }
    v1::ClientMessage m;
    ToProto(r, m.mutable_register_());
    return m;
  }

  // One stream: connect, register, read until the stream ends. Returns whether it
  // registered (which resets the backoff).
  bool RunStream() {
    struct stat st;
    if (stat(options_.socket_path.c_str(), &st) != 0) return false;  // No daemon.
    auto channel =
        grpc::CreateChannel("unix:" + options_.socket_path, grpc::InsecureChannelCredentials());
    auto stub = v1::ClientService::NewStub(channel);
    auto context = std::make_unique<grpc::ClientContext>();
    {
      MutexLock lock(&mu_);
      if (stop_) return false;
      context_ = context.get();
    }
    std::unique_ptr<Stream> stream = stub->Attach(context.get());
    bool registered = false;
    v1::DaemonMessage in;
    if (stream->Write(RegisterMessage()) && stream->Read(&in) && in.has_registered()) {
      registered = true;
      OnRegistered(FromProto(in.registered()));
      std::thread writer([&] { WriteLoop(stream.get()); });
      while (stream->Read(&in)) {
        if (in.has_directive()) {
          const Directive d = FromProto(in.directive());
          if (d.kind == Directive::Kind::kBudget) {
            MutexLock lock(&mu_);
            budgets_[d.gpu_uuid] = d.budget_bytes;
            pending_.erase(d.gpu_uuid);
          }
          Deliver(d);
        } else if (in.has_gpus_added()) {
          OnGpusAdded(FromProto(in.gpus_added()));
        }
      }
      {
        MutexLock lock(&mu_);
        stream_over_ = true;
      }
      cv_.NotifyAll();
      context->TryCancel();
      writer.join();
    } else {
      context->TryCancel();
    }
    const grpc::Status status = stream->Finish();
    {
      MutexLock lock(&mu_);
      context_ = nullptr;
      stream_over_ = false;
      outbox_.clear();
      adding_.clear();  // the next registration claims them
      pending_.clear();
    }
    bool stopping;
    {
      MutexLock lock(&mu_);
      stopping = stop_;
    }
    if (!stopping) {
      LOG(WARNING) << "memvirt: daemon stream at " << options_.socket_path
                   << (registered ? " ended: " : " failed: ") << status.error_code() << " "
                   << status.error_message();
    }
    return registered;
  }

  void OnRegistered(const protocol::Registered& r) {
    std::vector<Directive> initial;
    {
      MutexLock lock(&mu_);
      daemon_pid_ = static_cast<pid_t>(r.pid);
      daemon_version_ = r.protocol_version;
      ++registrations_;
      for (const protocol::GpuBudget& b : r.budgets) RecordGrant(b, &initial);
      Directive host;
      host.kind = Directive::Kind::kHostBudget;
      host.budget_bytes = r.host_budget_bytes;
      initial.push_back(host);
    }
    // Budgets first: a caller woken by WaitConnected() sees them (Note [initial budgets]).
    for (const Directive& d : initial) Deliver(d);
    SetState(State::kConnected);
  }

  // A budget the daemon announced (Registered or GpusAdded): remembered, and unless pending
  // delivered as an id-0 kBudget directive (Note [initial budgets]).
  void RecordGrant(const protocol::GpuBudget& b, std::vector<Directive>* deliver)
      MEMVIRT_REQUIRES(mu_) {
    budgets_[b.gpu_uuid] = b.budget_bytes;
    if (b.pending) {
      pending_.insert(b.gpu_uuid);
      return;
    }
    pending_.erase(b.gpu_uuid);
    Directive d;
    d.kind = Directive::Kind::kBudget;
    d.gpu_uuid = b.gpu_uuid;
    d.budget_bytes = b.budget_bytes;
    deliver->push_back(d);
  }

  // Answers the oldest AddGpusRequest (the daemon answers them in order).
  void OnGpusAdded(const protocol::GpusAdded& a) {
    std::vector<Directive> granted;
    {
      MutexLock lock(&mu_);
      if (adding_.empty()) return;  // not ours to answer
      const std::string uuid = std::move(adding_.front());
      adding_.pop_front();
      if (!a.error.empty()) {
        pending_.erase(uuid);
        LOG(WARNING) << "memvirt: the daemon did not add GPU " << uuid << ": " << a.error;
      }
      for (const protocol::GpuBudget& b : a.budgets) RecordGrant(b, &granted);
    }
    for (const Directive& d : granted) Deliver(d);
  }

  void WriteLoop(Stream* stream) {
    while (true) {
      v1::ClientMessage m;
      {
        MutexLock lock(&mu_);
        while (!stop_ && !stream_over_ && outbox_.empty()) cv_.Wait(&mu_);
        if (stop_ || stream_over_) return;
        m = std::move(outbox_.front());
        outbox_.pop_front();
      }
      if (!stream->Write(m)) return;  // The reader sees the broken stream too.
    }
  }

  void Run() {
    auto backoff = options_.initial_backoff;
    while (true) {
      const bool registered = RunStream();
      {
        MutexLock lock(&mu_);
        if (stop_) return;
      }
      SetState(State::kDisconnected);
      if (registered) backoff = options_.initial_backoff;
      const auto retry_at = std::chrono::steady_clock::now() + backoff;
      MutexLock lock(&mu_);
      while (!stop_ && cv_.WaitUntil(&mu_, retry_at)) {
      }
      if (stop_) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }

  Options options_;
  std::thread thread_;

  mutable Mutex mu_;
  CondVar cv_;  // state_, stop_, stream_over_ or outbox_ changed
  State state_ MEMVIRT_GUARDED_BY(mu_) = State::kConnecting;
  bool stop_ MEMVIRT_GUARDED_BY(mu_) = false;
  bool stream_over_ MEMVIRT_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ MEMVIRT_GUARDED_BY(mu_) = nullptr;
  std::deque<v1::ClientMessage> outbox_ MEMVIRT_GUARDED_BY(mu_);
  std::deque<Directive> polled_ MEMVIRT_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> budgets_ MEMVIRT_GUARDED_BY(mu_);
  std::vector<GpuClaim> claims_ MEMVIRT_GUARDED_BY(mu_);    // what each registration claims
  std::set<std::string> pending_ MEMVIRT_GUARDED_BY(mu_);   // BudgetPending
  std::deque<std::string> adding_ MEMVIRT_GUARDED_BY(mu_);  // AddGpusRequests not answered yet
  uint32_t daemon_version_ MEMVIRT_GUARDED_BY(mu_) = 0;     // of the current registration
  std::map<std::string, GpuUsage> last_usage_ MEMVIRT_GUARDED_BY(mu_);
  pid_t daemon_pid_ MEMVIRT_GUARDED_BY(mu_) = 0;
  uint64_t registrations_ MEMVIRT_GUARDED_BY(mu_) = 0;
};

}  // namespace

const char* StateName(State s) {
  switch (s) {
    case State::kConnecting:
      return "connecting";
    case State::kConnected:
      return "connected";
    case State::kDisconnected:
      return "disconnected";
    case State::kClosed:
      return "closed";
  }
  return "unknown";
}

std::unique_ptr<Client> Client::Start(Options options) {
  return std::make_unique<ClientImpl>(std::move(options));
}

}  // namespace memvirt::client

#include "daemon/server/tier_service.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/server/accept_backoff.h"
#include "daemon/server/peer_listener.h"
#include "glog/logging.h"

namespace memvirt::daemon {

using tier::Status;

struct TierService::Connection {
  int fd = -1;  // guarded by mu_ once the connection is listed; -1 after Finish
  uid_t uid = 0;
  bool pending = true;             // no Hello handled yet (guarded by mu_)
  std::optional<uint64_t> tenant;  // set when served (guarded by mu_)
  std::thread thread;
  std::atomic<bool> done{false};
};

namespace {

// Receives the Hello and its one SCM_RIGHTS descriptor (-1 if none came). Any descriptors
// beyond the first are closed.
//
// Note [short hello]: recvmsg with MSG_WAITALL still returns fewer bytes than asked when a
// signal interrupts it after some bytes arrived, and Linux ends a stream read after the segment
// that carried descriptors; so a short first read is completed by plain reads (the descriptor,
// if any, came with the first bytes).
bool ReceiveHello(int fd, tier::Hello* hello, int* memfd) {
  *memfd = -1;
  iovec iov{hello, sizeof(*hello)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t r;
  do {
    r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
  } while (r < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*memfd < 0) {
        *memfd = received;
      } else {
        close(received);
      }
    }
  }
  if (r <= 0) return false;
  const size_t got = static_cast<size_t>(r);
  return got == sizeof(*hello) ||
         tier::ReceiveAll(fd, reinterpret_cast<char*>(hello) + got, sizeof(*hello) - got);
}

// Note [sealed staging]
// The staging memfd is shared memory the client controls. Had the client shrunk it after the
// handshake, the daemon's next access through its mapping would fault (SIGBUS) and kill the
// daemon. So the daemon maps it only if the size is sealed: F_SEAL_SHRINK and F_SEAL_GROW set
// (seals can never be removed), checked with F_GET_SEALS; any other descriptor is refused.
bool StagingIsSealed(int memfd) {
  const int seals = fcntl(memfd, F_GET_SEALS);
  return seals >= 0 && (seals & tier::kRequiredStagingSeals) == tier::kRequiredStagingSeals;
}

}  // namespace

tier::Status TierStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return Status::kOk;
    case absl::StatusCode::kResourceExhausted:
      return Status::kNoSpace;
    case absl::StatusCode::kUnavailable:
      return Status::kIoError;
    case absl::StatusCode::kDataLoss:
      return Status::kDataLoss;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return Status::kInvalid;
    case absl::StatusCode::kNotFound:
      return Status::kNotFound;
    case absl::StatusCode::kPermissionDenied:
      return Status::kDenied;
    default:
      return Status::kInternal;
  }
}

absl::StatusOr<std::unique_ptr<TierService>> TierService::Start(const TierServiceOptions& options,
                                                                nvme::SwapStore* store) {
  absl::StatusOr<int> fd = ListenOnUnixSocket({options.socket_path, options.group});
  if (!fd.ok()) return fd.status();
  std::unique_ptr<TierService> service(new TierService(options, store, *fd));
  if (service->wake_fd_ < 0 || service->reap_fd_ < 0) {
    return absl::InternalError("eventfd failed");
  }
  service->accept_thread_ = std::thread([s = service.get()] { s->AcceptLoop(); });
  return service;
}

TierService::TierService(const TierServiceOptions& options, nvme::SwapStore* store, int listen_fd)
    : options_(options),
      store_(store),
      listen_fd_(listen_fd),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      reap_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

TierService::~TierService() { Stop(); }

void TierService::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : connections_) {
      if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);  // wakes their blocking reads
    }
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  if (accept_thread_.joinable()) accept_thread_.join();
  std::vector<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    if (c->thread.joinable()) c->thread.join();
  }
  close(listen_fd_);
  close(wake_fd_);
  close(reap_fd_);
  unlink(options_.socket_path.c_str());
}

TierStats TierService::stats() const {
  absl::MutexLock lock(&mu_);
  TierStats s = stats_;
  s.connections = 0;
  for (const auto& c : connections_) s.connections += c->done.load() ? 0 : 1;
  return s;
}

void TierService::Reap() {
  uint64_t count;
  (void)!read(reap_fd_, &count, sizeof(count));
  size_t k = 0;
  for (size_t i = 0; i < connections_.size(); ++i) {
    if (connections_[i]->done.load()) {
      connections_[i]->thread.join();
    } else {
      connections_[k++] = std::move(connections_[i]);
    }
  }
  connections_.resize(k);
}

void TierService::Finish(Connection* c) {
  {
    absl::MutexLock lock(&mu_);
    close(c->fd);  // the peer sees EOF now
    c->fd = -1;
  }
  c->done.store(true);
  const uint64_t one = 1;
  (void)!write(reap_fd_, &one, sizeof(one));  // the accept loop joins this thread at once
}

void TierService::AcceptLoop() {
  AcceptBackoff backoff(options_.socket_path);
  absl::Duration wait = absl::ZeroDuration();
  while (true) {
    // While backing off (Note [accept backoff]) the listening socket is left out of the poll.
    pollfd fds[3] = {{wake_fd_, POLLIN, 0}, {reap_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const bool backing_off = wait > absl::ZeroDuration();
    const int timeout_ms = backing_off ? static_cast<int>(absl::ToInt64Milliseconds(wait)) : -1;
    const int r = poll(fds, backing_off ? 2 : 3, timeout_ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "tier socket poll";
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents != 0) {
      absl::MutexLock lock(&mu_);
      Reap();
    }
    if (backing_off && r == 0) wait = absl::ZeroDuration();
    if (backing_off || fds[2].revents == 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      wait = backoff.OnError(errno, absl::Now());
      continue;
    }
    backoff.OnSuccess();
    AcceptOne(fd);
  }
}

void TierService::AcceptOne(int fd) {
  absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(fd);
  absl::MutexLock lock(&mu_);
  Reap();
  if (stopped_ || !peer.ok()) {
    close(fd);
    return;
  }
  size_t pending_of_uid = 0;
  for (const auto& c : connections_) {
    if (c->pending && c->uid == peer->uid) ++pending_of_uid;
  }
  const char* limit = connections_.size() >= options_.max_connections ? "connections open"
                      : pending_of_uid >= options_.max_pending_per_uid
                          ? "connections of this uid waiting for their hello"
                          : nullptr;
  if (limit != nullptr) {
    ++stats_.refused;
    uint64_t suppressed = 0;
    if (refusal_log_.Allow(absl::Now(), &suppressed)) {
      LOG(WARNING) << "tier socket: refusing a connection of uid " << peer->uid << " (too many "
                   << limit << "; " << suppressed << " similar lines left out)";
    }
    close(fd);
    return;
  }
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->uid = peer->uid;
  Connection* raw = c.get();
  connections_.push_back(std::move(c));
  raw->thread = std::thread([this, raw] {
    Serve(raw);
    Finish(raw);
  });
}

bool TierService::AdmitTenant(Connection* c, uint64_t tenant) {
  absl::MutexLock lock(&mu_);
  c->pending = false;
  size_t served = 0;
  for (const auto& other : connections_) {
    if (other.get() != c && other->fd >= 0 && other->tenant == tenant) ++served;
  }
  if (served >= options_.max_connections_per_client) {
    ++stats_.refused;
    return false;
  }
  c->tenant = tenant;
  return true;
}

bool TierService::AwaitRequest(Connection* c, uint64_t tenant, bool holds_slabs) {
  if (options_.idle_timeout == absl::InfiniteDuration()) return true;
  const int idle_ms = static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(options_.idle_timeout), INT32_MAX));
  while (true) {
    pollfd p = {c->fd, POLLIN, 0};
    const int r = poll(&p, 1, idle_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r != 0) return true;  // a request, EOF or an error: the read tells which
    if (!holds_slabs) {
      VLOG(1) << "tier connection of client " << tenant << " idle with nothing stored; closing";
      return false;
    }
    absl::MutexLock lock(&mu_);
    ++stats_.idle_kept;
  }
}

absl::Status TierService::NotOwnSlab(uint64_t tenant, uint64_t id) const {
  const absl::StatusOr<uint64_t> bytes = store_->SlabBytes(tenant, id);
  if (bytes.ok()) return absl::PermissionDeniedError("a slab of another connection");
  return bytes.status();  // unknown, or another tenant's
}

void TierService::Serve(Connection* c) {
  tier::Hello hello;
  int memfd = -1;
  const int64_t hello_us = absl::ToInt64Microseconds(options_.hello_timeout);
  const timeval hello_timeout = {static_cast<time_t>(hello_us / 1000000),
                                 static_cast<suseconds_t>(hello_us % 1000000)};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &hello_timeout, sizeof(hello_timeout));
  const bool got_hello = ReceiveHello(c->fd, &hello, &memfd);
  const timeval no_timeout = {0, 0};
  setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &no_timeout, sizeof(no_timeout));
  tier::HelloReply reply;
  absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(c->fd);
  std::optional<uint64_t> tenant;
  if (peer.ok()) tenant = options_.tenant_of(*peer);
  struct stat st;
  const uint64_t staging_bytes = uint64_t{hello.staging_slots} * tier::kStagingSlotBytes;
  if (!got_hello || hello.magic != tier::kTierMagic || hello.version != tier::kTierVersion ||
      memfd < 0 || hello.staging_slots == 0 || hello.staging_slots > tier::kMaxStagingSlots ||
      fstat(memfd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < staging_bytes || !StagingIsSealed(memfd)) {
    reply.status = Status::kInvalid;
  } else if (!tenant.has_value()) {
    reply.status = Status::kDenied;
  } else if (!AdmitTenant(c, *tenant)) {
    LOG(WARNING) << "tier connection of client " << *tenant << " refused: it has "
                 << options_.max_connections_per_client << " already";
    reply.status = Status::kDenied;
  }
  void* staging = MAP_FAILED;
  if (reply.status == Status::kOk) {
    staging = mmap(nullptr, staging_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (staging == MAP_FAILED) reply.status = Status::kInternal;
  }
  if (memfd >= 0) close(memfd);
  if (reply.status != Status::kOk) {
    {
      absl::MutexLock lock(&mu_);
      c->pending = false;
    }
    LOG(WARNING) << "tier connection refused (" << tier::StatusName(reply.status) << ", pid "
                 << (peer.ok() ? peer->pid : 0) << ")";
    (void)tier::SendAll(c->fd, &reply, sizeof(reply));
    return;
  }
  reply.tenant = *tenant;
  reply.capacity_bytes = store_->stats().capacity_bytes;
  LOG(INFO) << "tier connection from pid " << peer->pid << " (client " << *tenant << ", "
            << hello.staging_slots << " staging slots)";
  auto* base = static_cast<uint8_t*>(staging);
  bool open = tier::SendAll(c->fd, &reply, sizeof(reply));
  // Note [slabs per connection]: the slabs this connection stored.
  absl::flat_hash_set<nvme::SlabId> own;
  while (open && AwaitRequest(c, *tenant, !own.empty())) {
    tier::Request req;
    if (!tier::ReceiveAll(c->fd, &req, sizeof(req))) break;
    tier::Reply out;
    const bool slot_ok = req.slot < hello.staging_slots;
    auto span = [&] {
      return absl::Span<uint8_t>(base + uint64_t{req.slot} * tier::kStagingSlotBytes,
                                 tier::kStagingSlotBytes);
    };
    absl::Status s;
    const absl::Time started = absl::Now();
    switch (req.op) {
      case tier::Op::kStore:
        if (!slot_ok) {
          s = absl::InvalidArgumentError("bad slot");
          break;
        }
        if (absl::StatusOr<nvme::SlabId> id = store_->Put(*tenant, span()); id.ok()) {
          out.id = *id;
          own.insert(*id);
        } else {
          s = id.status();
        }
        break;
      case tier::Op::kLoad:
        if (!slot_ok) {
          s = absl::InvalidArgumentError("bad slot");
        } else if (!own.contains(req.id)) {
          s = NotOwnSlab(*tenant, req.id);
        } else {
          s = store_->Get(*tenant, req.id, span());
        }
        break;
      case tier::Op::kDiscard:
        if (own.erase(req.id) == 0) {
          s = NotOwnSlab(*tenant, req.id);
        } else {
          s = store_->Discard(*tenant, req.id);
        }
        break;
      default:
        s = absl::InvalidArgumentError("bad op");
    }
    out.status = TierStatusOf(s);
    {
      absl::MutexLock lock(&mu_);
      if (!s.ok()) ++stats_.failures;
      const bool io_error = out.status == Status::kIoError || out.status == Status::kDataLoss;
      if (req.op == tier::Op::kStore) {
        ++stats_.stores;
        stats_.store_io_errors += io_error ? 1 : 0;
        stats_.store_latency.Add(absl::Now() - started);
      }
      if (req.op == tier::Op::kLoad) {
        ++stats_.loads;
        stats_.load_io_errors += io_error ? 1 : 0;
        stats_.load_latency.Add(absl::Now() - started);
      }
      if (req.op == tier::Op::kDiscard) ++stats_.discards;
    }
    if (!s.ok() && req.op != tier::Op::kDiscard) {
      LOG(WARNING) << "tier request " << static_cast<uint32_t>(req.op) << " of client " << *tenant
                   << " failed: " << s;
    }
    open = tier::SendAll(c->fd, &out, sizeof(out));
  }
  uint64_t freed = 0;
  for (const nvme::SlabId id : own) {
    const absl::StatusOr<uint64_t> bytes = store_->SlabBytes(*tenant, id);
    if (store_->Discard(*tenant, id).ok() && bytes.ok()) freed += *bytes;
  }
  LOG(INFO) << "tier connection of client " << *tenant << " closed; " << freed
            << " bytes of swap freed";
  munmap(staging, staging_bytes);
}

}  // namespace memvirt::daemon

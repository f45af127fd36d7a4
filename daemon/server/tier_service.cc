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

#include "absl/strings/str_cat.h"
#include "daemon/server/peer_listener.h"
#include "glog/logging.h"

namespace memvirt::daemon {

using tier::Status;

struct TierService::Connection {
  int fd = -1;
  std::thread thread;
  std::atomic<bool> done{false};
};

namespace {

// Connections served at once; more are closed at accept (each has a thread).
constexpr size_t kMaxConnections = 1024;

// Reads exactly `n` bytes. False on EOF, error or shutdown.
bool ReadFull(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteFull(int fd, const void* buf, size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Receives the Hello and its one SCM_RIGHTS descriptor (-1 if none came). Any descriptors
// beyond the first are closed.
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
  return r == static_cast<ssize_t>(sizeof(*hello));
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
  if (service->wake_fd_ < 0) return absl::InternalError("eventfd failed");
  service->accept_thread_ = std::thread([s = service.get()] { s->AcceptLoop(); });
  return service;
}

TierService::TierService(const TierServiceOptions& options, nvme::SwapStore* store, int listen_fd)
    : options_(options),
      store_(store),
      listen_fd_(listen_fd),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

TierService::~TierService() { Stop(); }

void TierService::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& c : connections_) shutdown(c->fd, SHUT_RDWR);  // wakes their blocking reads
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
    close(c->fd);
  }
  close(listen_fd_);
  close(wake_fd_);
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
  size_t k = 0;
  for (size_t i = 0; i < connections_.size(); ++i) {
    if (connections_[i]->done.load()) {
      connections_[i]->thread.join();
      close(connections_[i]->fd);
    } else {
      connections_[k++] = std::move(connections_[i]);
    }
  }
  connections_.resize(k);
}

void TierService::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "tier socket poll";
      return;
    }
    if (fds[1].revents != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // EAGAIN after a spurious wake-up, or the peer went away
    absl::MutexLock lock(&mu_);
    Reap();
    if (stopped_) {
      close(fd);
      return;
    }
    if (connections_.size() >= kMaxConnections) {
      LOG(WARNING) << "tier socket: " << kMaxConnections << " connections open; refusing another";
      close(fd);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    Connection* raw = c.get();
    connections_.push_back(std::move(c));
    raw->thread = std::thread([this, raw] {
      Serve(raw);
      shutdown(raw->fd, SHUT_RDWR);  // the peer sees EOF now; the fd is closed by Reap/Stop
      raw->done.store(true);
    });
  }
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
  }
  void* staging = MAP_FAILED;
  if (reply.status == Status::kOk) {
    staging = mmap(nullptr, staging_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (staging == MAP_FAILED) reply.status = Status::kInternal;
  }
  if (memfd >= 0) close(memfd);
  if (reply.status != Status::kOk) {
    LOG(WARNING) << "tier connection refused (" << tier::StatusName(reply.status) << ", pid "
                 << (peer.ok() ? peer->pid : 0) << ")";
    (void)WriteFull(c->fd, &reply, sizeof(reply));
    return;
  }
  reply.tenant = *tenant;
  reply.capacity_bytes = store_->stats().capacity_bytes;
  LOG(INFO) << "tier connection from pid " << peer->pid << " (client " << *tenant << ", "
            << hello.staging_slots << " staging slots)";
  auto* base = static_cast<uint8_t*>(staging);
  bool open = WriteFull(c->fd, &reply, sizeof(reply));
  while (open) {
    tier::Request req;
    if (!ReadFull(c->fd, &req, sizeof(req))) break;
    tier::Reply out;
    const bool slot_ok = req.slot < hello.staging_slots;
    auto span = [&] {
      return absl::Span<uint8_t>(base + uint64_t{req.slot} * tier::kStagingSlotBytes,
                                 tier::kStagingSlotBytes);
    };
    absl::Status s;
    switch (req.op) {
      case tier::Op::kStore:
        if (!slot_ok) {
          s = absl::InvalidArgumentError("bad slot");
          break;
        }
        if (absl::StatusOr<nvme::SlabId> id = store_->Put(*tenant, span()); id.ok()) {
          out.id = *id;
        } else {
          s = id.status();
        }
        break;
      case tier::Op::kLoad:
        s = slot_ok ? store_->Get(*tenant, req.id, span()) : absl::InvalidArgumentError("bad slot");
        break;
      case tier::Op::kDiscard:
        s = store_->Discard(*tenant, req.id);
        break;
      default:
        s = absl::InvalidArgumentError("bad op");
    }
    out.status = TierStatusOf(s);
    {
      absl::MutexLock lock(&mu_);
      if (!s.ok()) ++stats_.failures;
      if (req.op == tier::Op::kStore) ++stats_.stores;
      if (req.op == tier::Op::kLoad) ++stats_.loads;
      if (req.op == tier::Op::kDiscard) ++stats_.discards;
    }
    if (!s.ok() && req.op != tier::Op::kDiscard) {
      LOG(WARNING) << "tier request " << static_cast<uint32_t>(req.op) << " of client " << *tenant
                   << " failed: " << s;
    }
    open = WriteFull(c->fd, &out, sizeof(out));
  }
  const uint64_t freed = store_->DiscardAllOf(*tenant);
  LOG(INFO) << "tier connection of client " << *tenant << " closed; " << freed
            << " bytes of swap freed";
  munmap(staging, staging_bytes);
}

}  // namespace memvirt::daemon

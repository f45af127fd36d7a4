#include "daemon/server/peer_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/mutex_lock.h"
#include "daemon/server/accept_backoff.h"
#include "glog/logging.h"
#include "grpcpp/server.h"
#include "grpcpp/server_posix.h"

namespace memvirt::daemon {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

// True if a process accepts connections on `path`.
bool SomeoneListens(const std::string& path) {
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return false;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool listening = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return listening;
}

}  // namespace

absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return Errno("getsockopt(SO_PEERCRED)");
  }
  PeerCredentials peer{.pid = cred.pid, .uid = cred.uid, .gid = cred.gid, .groups = {}};
  gid_t groups[64];
  socklen_t glen = sizeof(groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
    peer.groups.assign(groups, groups + glen / sizeof(gid_t));
  }  // ERANGE (more than 64 groups) or an old kernel: primary gid only.
  return peer;
}

PeerListener::~PeerListener() { Stop(); }

absl::StatusOr<int> ListenOnUnixSocket(const SocketOptions& options) {
  const std::string& path = options.path;
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) return absl::InvalidArgumentError("socket path too long");
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " exists and is not a socket"));
    }
    if (SomeoneListens(path)) {
      return absl::FailedPreconditionError(absl::StrCat("another daemon is listening on ", path));
    }
    LOG(INFO) << "removing stale socket " << path;
    unlink(path.c_str());
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Errno("socket");
  auto fail = [fd](absl::Status s) {
    close(fd);
    return s;
  };
  // Note: bind() creates the node with the umask applied; tighten it before listen(), so
  // nobody outside owner and group can connect in between.
  const mode_t old_mask = umask(0117);
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  umask(old_mask);
  if (rc != 0) return fail(Errno(absl::StrCat("bind ", path)));
  if (options.group.has_value() &&
      chown(path.c_str(), static_cast<uid_t>(-1), *options.group) != 0) {
    return fail(Errno(absl::StrCat("chown ", path)));
  }
  if (chmod(path.c_str(), 0660) != 0) return fail(Errno(absl::StrCat("chmod ", path)));
  if (listen(fd, 128) != 0) return fail(Errno("listen"));
  return fd;
}

absl::Status PeerListener::Bind(const SocketOptions& options, const ConnectionLimits& limits) {
  path_ = options.path;
  limits_ = limits;
  absl::StatusOr<int> fd = ListenOnUnixSocket(options);
  if (!fd.ok()) return fd.status();
  listen_fd_ = *fd;
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Errno("eventfd");
  return absl::OkStatus();
}

void PeerListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { AcceptLoop(server); });
}

void PeerListener::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(path_.c_str());
  }
  if (wake_fd_ >= 0) {
    close(wake_fd_);
    wake_fd_ = -1;
  }
}

void PeerListener::AcceptLoop(grpc::Server* server) {
  AcceptBackoff backoff(path_);
  absl::Duration wait = absl::ZeroDuration();
  while (true) {
    // While backing off (Note [accept backoff]) only the wake fd is polled.
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const bool backing_off = wait > absl::ZeroDuration();
    const int r = poll(fds, backing_off ? 1 : 2,
                       backing_off ? static_cast<int>(absl::ToInt64Milliseconds(wait)) : -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "poll on " << path_;
      return;
    }
    if (fds[0].revents != 0) return;
    if (backing_off) {
      wait = absl::ZeroDuration();
      continue;
    }
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      wait = backoff.OnError(errno, absl::Now());
      continue;
    }
    backoff.OnSuccess();
    AcceptOne(server, fd);
  }
}

void PeerListener::ForgetClosed() {
  for (auto it = by_fd_.begin(); it != by_fd_.end();) {
    struct stat st;
    const bool same =
        fstat(it->first, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == it->second.inode;
    if (same) {
      ++it;
    } else {
      by_fd_.erase(it++);
    }
  }
}

void PeerListener::AcceptOne(grpc::Server* server, int fd) {
  absl::StatusOr<PeerCredentials> peer = ReadPeerCredentials(fd);
  struct stat st;
  if (!peer.ok() || fstat(fd, &st) != 0) {
    LOG(WARNING) << "dropping connection: " << peer.status();
    close(fd);
    return;
  }
  {
    MutexLock lock(&mu_);
    ForgetClosed();
    size_t of_uid = 0;
    for (const auto& [other_fd, c] : by_fd_) of_uid += c.peer.uid == peer->uid ? 1 : 0;
    const char* limit = by_fd_.size() >= limits_.max_connections ? "connections open"
                        : peer->uid != 0 && of_uid >= limits_.max_connections_per_uid
                            ? "connections of this uid"
                            : nullptr;
    if (limit != nullptr) {
      ++refused_;
      uint64_t suppressed = 0;
      if (refusal_log_.Allow(absl::Now(), &suppressed)) {
        LOG(WARNING) << "refusing a connection of pid " << peer->pid << " uid " << peer->uid
                     << " on " << path_ << " (too many " << limit << "; " << suppressed
                     << " similar lines left out)";
      }
      close(fd);
      return;
    }
    by_fd_[fd] = {*peer, st.st_ino};
  }
  VLOG(1) << "connection fd " << fd << " from pid " << peer->pid << " uid " << peer->uid;
  grpc::AddInsecureChannelFromFd(server, fd);  // The server owns the fd from here on.
}

uint64_t PeerListener::refused() const {
  MutexLock lock(&mu_);
  return refused_;
}

absl::StatusOr<PeerCredentials> PeerListener::Lookup(const std::string& grpc_peer) const {
  int fd = -1;
  if (!absl::StartsWith(grpc_peer, "fd:") || !absl::SimpleAtoi(grpc_peer.substr(3), &fd)) {
    return absl::UnauthenticatedError(absl::StrCat("unknown peer '", grpc_peer, "'"));
  }
  MutexLock lock(&mu_);
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return absl::UnauthenticatedError("connection without credentials");
  return it->second.peer;
}

}  // namespace memvirt::daemon

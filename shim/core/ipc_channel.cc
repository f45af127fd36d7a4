#include "shim/core/ipc_channel.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

namespace memvirt::shim {

namespace {

socklen_t AbstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);  // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

void EncodeIpcHandle(const ShimIpcHandle& h, CUipcMemHandle* out) {
  std::memset(out, 0, sizeof(*out));
  std::memcpy(out, &h, sizeof(h));
}

bool DecodeIpcHandle(const CUipcMemHandle& in, ShimIpcHandle* out) {
  std::memcpy(out, &in, sizeof(*out));
  return std::memcmp(out->magic, kShimIpcMagic, sizeof(kShimIpcMagic)) == 0 &&
         out->version == kShimIpcVersion;
}

std::string IpcSocketName(uint32_t pid, uint64_t listener) {
  char name[64];
  std::snprintf(name, sizeof(name), "memvirt-ipc.%u.%016llx", pid,
                static_cast<unsigned long long>(listener));
  return name;
}

int ListenIpc(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd, 64) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int ConnectIpc(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  int r;
  do {
    r = connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

bool PeerIsSameUser(int sock) {
  ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == geteuid();
}

bool SendWithFds(int sock, const void* data, size_t bytes, const int* fds, size_t num_fds) {
  if (num_fds > kIpcFdsPerMessage) return false;
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kIpcFdsPerMessage)];
  if (num_fds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * num_fds);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * num_fds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * num_fds);
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(bytes);
}

bool ReceiveWithFds(int sock, void* data, size_t bytes, std::vector<int>* fds) {
  iovec iov{data, bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kIpcFdsPerMessage)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(fd);
    }
  }
  return n == static_cast<ssize_t>(bytes) && (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0;
}

}  // namespace memvirt::shim

// The NVMe tier's data channel between a shim process and memvirtd.
//
// Note [tier channel]
//   Slab data does not travel over gRPC. A process that wants the NVMe tier
//   connects to the daemon's tier socket (kTierSocketSuffix appended to the
//   daemon socket path), after it registered on the main stream, and sends a
//   Hello with one SCM_RIGHTS file descriptor: a memfd of
//   `staging_slots` x kStagingSlotBytes that both sides map (the staging
//   area). The memfd's size must be sealed (kRequiredStagingSeals; Note [sealed staging] in
//   daemon/server/tier_service.cc): the daemon refuses an unsealed one (kInvalid). The daemon
//   identifies the process by SO_PEERCRED (never by what it sends), maps it to the client
//   registered with that pid, and uses that client id as the swap store's tenant: a process can
//   only ever name its own slabs. Then every Request gets exactly one Reply, in request order:
//     kStore    writes staging slot `slot` (2 MiB) to swap; Reply.id names it.
//     kLoad     reads slab `id` into staging slot `slot`.
//     kDiscard  frees slab `id`.
//   The daemon serves a connection's requests one at a time, so a process
//   may pipeline them (start loads, read their replies later). Closing the
//   connection discards all of the process's slabs.
//
// All integers are little-endian host order (the peers are on one node).
#ifndef MEMVIRT_TIER_PROTOCOL_H_
#define MEMVIRT_TIER_PROTOCOL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace memvirt::tier {

inline constexpr char kTierSocketSuffix[] = ".tier";
inline constexpr uint32_t kTierMagic = 0x3154564d;  // "MVT1"
inline constexpr uint32_t kTierVersion = 1;
inline constexpr uint64_t kStagingSlotBytes = 2ull << 20;
inline constexpr uint32_t kMaxStagingSlots = 256;
inline constexpr int kRequiredStagingSeals = F_SEAL_SHRINK | F_SEAL_GROW;

struct Hello {
  uint32_t magic = kTierMagic;
  uint32_t version = kTierVersion;
  uint32_t staging_slots = 0;  // the memfd must hold at least this many slots
  uint32_t reserved = 0;
};

enum class Status : int32_t {
  kOk = 0,
  kNoSpace = 1,   // swap full or ENOSPC: the data was not stored
  kIoError = 2,   // the device failed the request (EIO)
  kDataLoss = 3,  // checksum mismatch or torn write
  kInvalid = 4,   // malformed request (bad op, slot, size)
  kNotFound = 5,  // unknown or discarded slab
  kDenied = 6,    // not a registered client, or not its slab
  kInternal = 7,
};

struct HelloReply {
  Status status = Status::kOk;
  uint32_t reserved = 0;
  uint64_t tenant = 0;          // the client id the daemon knows the process by
  uint64_t capacity_bytes = 0;  // total swap space of the node (shared by all clients)
};

enum class Op : uint32_t { kStore = 1, kLoad = 2, kDiscard = 3 };

struct Request {
  Op op = Op::kStore;
  uint32_t slot = 0;  // kStore, kLoad: staging slot
  uint64_t id = 0;    // kLoad, kDiscard: slab
};

struct Reply {
  Status status = Status::kOk;
  uint32_t reserved = 0;
  uint64_t id = 0;  // kStore: the new slab
};

static_assert(sizeof(Hello) == 16 && sizeof(HelloReply) == 24);
static_assert(sizeof(Request) == 16 && sizeof(Reply) == 16);

// A stream socket connected to the Unix socket at `path`, or -1 (errno set; a path too long
// for sockaddr_un gives ENAMETOOLONG). The caller owns the descriptor.
inline int ConnectUnixSocket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// A staging memfd of `slots` slots whose size is sealed (kRequiredStagingSeals, and F_SEAL_SEAL
// so no other seal can be added later), or -1 (errno set). The caller owns the descriptor.
inline int CreateStagingMemfd(uint32_t slots) {
  const int fd = memfd_create("memvirt-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(uint64_t{slots} * kStagingSlotBytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, kRequiredStagingSeals | F_SEAL_SEAL) != 0) {
    const int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

// Sends all `n` bytes on the stream socket `fd`, continuing after short and interrupted sends
// (a signal handler installed without SA_RESTART interrupts blocking calls). False on an error
// or a closed peer.
inline bool SendAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Receives exactly `n` bytes from the stream socket `fd`, continuing after short and
// interrupted reads. False on EOF, an error or a receive timeout.
inline bool ReceiveAll(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Sends `n` bytes with `memfd` attached (SCM_RIGHTS) on the connected socket `fd`, in one
// message. The caller keeps its own copy of `memfd`. False if the bytes did not go out whole.
inline bool SendWithDescriptor(int fd, const void* data, size_t n, int memfd) {
  iovec iov{const_cast<void*>(data), n};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &memfd, sizeof(int));
  ssize_t sent;
  do {
    sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(n);
}

// Sends `hello` with `memfd` attached (SCM_RIGHTS) on the connected socket `fd`. The caller
// keeps its own copy of `memfd`. False if the message did not go out whole.
inline bool SendHello(int fd, const Hello& hello, int memfd) {
  return SendWithDescriptor(fd, &hello, sizeof(hello), memfd);
}

inline const char* StatusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kNoSpace:
      return "no space";
    case Status::kIoError:
      return "I/O error";
    case Status::kDataLoss:
      return "data loss";
    case Status::kInvalid:
      return "invalid request";
    case Status::kNotFound:
      return "not found";
    case Status::kDenied:
      return "denied";
    case Status::kInternal:
      return "internal error";
  }
  return "unknown";
}

}  // namespace memvirt::tier

#endif  // MEMVIRT_TIER_PROTOCOL_H_

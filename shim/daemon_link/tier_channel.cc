#include "shim/daemon_link/tier_channel.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/core/log.h"

namespace memvirt::shim {
namespace {

SpillResult ResultOf(tier::Status s) {
  switch (s) {
    case tier::Status::kOk:
      return SpillResult::kOk;
    case tier::Status::kNoSpace:
      return SpillResult::kNoSpace;
    default:
      return SpillResult::kFailed;
  }
}

// Waits until `fd` is readable (or writable); false on timeout or error.
bool WaitFor(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd p = {fd, events, 0};
  int r;
  do {
    r = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (POLLERR | POLLNVAL)) == 0;
}

bool SendAll(int fd, const void* data, size_t n, std::chrono::milliseconds timeout) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t r = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && WaitFor(fd, POLLOUT, timeout)) {
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<TierChannel> TierChannel::Connect(const std::string& socket_path,
                                                  uint32_t staging_slots,
                                                  std::chrono::milliseconds timeout,
                                                  const char** error) {
  *error = nullptr;
  if (staging_slots == 0 || staging_slots > tier::kMaxStagingSlots) {
    *error = "bad staging slot count";
    return nullptr;
  }
  const int fd = tier::ConnectUnixSocket(socket_path);
  if (fd < 0) {
    *error = errno == ENAMETOOLONG                ? "tier socket path too long"
             : errno == EMFILE || errno == ENFILE ? "socket() failed"
                                                  : "no tier socket (the daemon has no NVMe tier)";
    return nullptr;
  }
  const uint64_t bytes = uint64_t{staging_slots} * tier::kStagingSlotBytes;
  const int memfd = tier::CreateStagingMemfd(staging_slots);
  if (memfd < 0) {
    close(fd);
    *error = "cannot create the staging memfd";
    return nullptr;
  }
  void* staging = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (staging == MAP_FAILED) {
    close(memfd);
    close(fd);
    *error = "cannot map the staging memfd";
    return nullptr;
  }
  tier::Hello hello;
  hello.staging_slots = staging_slots;
  const bool sent = tier::SendHello(fd, hello, memfd);
  close(memfd);  // the mapping and the daemon's copy keep it alive
  std::unique_ptr<TierChannel> channel(
      new TierChannel(fd, static_cast<uint8_t*>(staging), staging_slots, timeout));
  tier::HelloReply reply;
  size_t got = 0;
  while (sent && got < sizeof(reply) && WaitFor(fd, POLLIN, timeout)) {
    const ssize_t r = recv(fd, reinterpret_cast<char*>(&reply) + got, sizeof(reply) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got != sizeof(reply)) {
    *error = "the daemon did not answer on the tier socket";
    return nullptr;
  }
  if (reply.status != tier::Status::kOk) {
    *error = reply.status == tier::Status::kDenied ? "the daemon refused the tier connection"
                                                   : "the daemon rejected the tier hello";
    return nullptr;
  }
  channel->tenant_ = reply.tenant;
  channel->capacity_ = reply.capacity_bytes;
  return channel;
}

TierChannel::TierChannel(int fd, uint8_t* staging, uint32_t slots,
                         std::chrono::milliseconds timeout)
    : fd_(fd),
      staging_(staging),
      slots_(slots),
      timeout_(timeout),
      load_state_(slots, 0),
      load_result_(slots, SpillResult::kOk) {}

TierChannel::~TierChannel() {
  close(fd_);  // the daemon discards this process's slabs
  munmap(staging_, uint64_t{slots_} * tier::kStagingSlotBytes);
}

void* TierChannel::staging(uint32_t slot) {
  return staging_ + uint64_t{slot} * tier::kStagingSlotBytes;
}

void TierChannel::Break() {
  if (!broken_) MEMSHIM_LOG(kError, "lost the daemon's tier channel; spilled data is gone");
  broken_ = true;
  for (size_t s = 0; s < load_state_.size(); ++s) {
    if (load_state_[s] == 1) {
      load_state_[s] = 2;
      load_result_[s] = SpillResult::kBroken;
    }
  }
  outstanding_.clear();
  shutdown(fd_, SHUT_RDWR);
}

bool TierChannel::Send(const tier::Request& r) {
  if (broken_) return false;
  if (!SendAll(fd_, &r, sizeof(r), timeout_)) {
    Break();
    return false;
  }
  outstanding_.push_back({r.op, r.slot});
  return true;
}

bool TierChannel::ReadOneReply(bool wait) {
  if (broken_ || outstanding_.empty()) return false;
  while (partial_bytes_ < sizeof(partial_)) {
    const ssize_t r = recv(fd_, reinterpret_cast<char*>(&partial_) + partial_bytes_,
                           sizeof(partial_) - partial_bytes_, MSG_DONTWAIT);
    if (r > 0) {
      partial_bytes_ += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait) return false;
      if (WaitFor(fd_, POLLIN, timeout_)) continue;
    }
    Break();  // EOF, error or timeout
    return false;
  }
  partial_bytes_ = 0;
  const Outstanding o = outstanding_.front();
  outstanding_.pop_front();
  if (o.op == tier::Op::kLoad) {
    load_state_[o.slot] = 2;
    load_result_[o.slot] = ResultOf(partial_.status);
  } else if (o.op == tier::Op::kStore) {
    store_done_ = true;
    store_reply_ = partial_;
  }
  return true;
}

SpillResult TierChannel::Store(uint32_t slot, uint64_t* id) {
  if (slot >= slots_) return SpillResult::kFailed;
  store_done_ = false;
  if (!Send({tier::Op::kStore, slot, 0})) return SpillResult::kBroken;
  while (!store_done_) {
    if (!ReadOneReply(/*wait=*/true)) return SpillResult::kBroken;
  }
  if (store_reply_.status != tier::Status::kOk) return ResultOf(store_reply_.status);
  *id = store_reply_.id;
  return SpillResult::kOk;
}

SpillResult TierChannel::StartLoad(uint64_t id, uint32_t slot) {
  if (slot >= slots_ || load_state_[slot] != 0) return SpillResult::kFailed;
  if (!Send({tier::Op::kLoad, slot, id})) return SpillResult::kBroken;
  load_state_[slot] = 1;
  return SpillResult::kOk;
}

SpillResult TierChannel::FinishLoad(uint32_t slot, bool wait) {
  if (slot >= slots_ || load_state_[slot] == 0) return SpillResult::kFailed;
  while (load_state_[slot] == 1) {
    if (!ReadOneReply(wait)) {
      if (load_state_[slot] == 1 && !broken_) return SpillResult::kPending;
    }
  }
  load_state_[slot] = 0;
  return load_result_[slot];
}

void TierChannel::Discard(uint64_t id) {
  if (Send({tier::Op::kDiscard, 0, id})) {
    // Replies of discards carry nothing; drain what has arrived so the
    // daemon's send buffer never fills up with them.
    while (ReadOneReply(/*wait=*/false)) {
    }
  }
}

}  // namespace memvirt::shim

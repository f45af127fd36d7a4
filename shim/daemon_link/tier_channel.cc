#include "shim/daemon_link/tier_channel.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

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
                                                  const TierChannelTimeouts& timeouts,
                                                  const char** error) {
  *error = nullptr;
  if (staging_slots == 0 || staging_slots > tier::kMaxStagingSlots) {
    *error = "bad staging slot count";
    return nullptr;
  }
  const uint64_t bytes = uint64_t{staging_slots} * tier::kStagingSlotBytes;
  const int memfd = tier::CreateStagingMemfd(staging_slots);
  if (memfd < 0) {
    *error = "cannot create the staging memfd";
    return nullptr;
  }
  void* staging = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (staging == MAP_FAILED) {
    close(memfd);
    *error = "cannot map the staging memfd";
    return nullptr;
  }
  std::unique_ptr<TierChannel> channel(
      new TierChannel(socket_path, memfd, static_cast<uint8_t*>(staging), staging_slots, timeouts));
  {
    MutexLock lock(&channel->mu_);
    *error = channel->Handshake();
  }
  if (*error != nullptr) return nullptr;
  return channel;
}

const char* TierChannel::Handshake() {
  fd_ = tier::ConnectUnixSocket(socket_path_);
  if (fd_ < 0) {
    return errno == ENAMETOOLONG                ? "tier socket path too long"
           : errno == EMFILE || errno == ENFILE ? "socket() failed"
                                                : "no tier socket (the daemon has no NVMe tier)";
  }
  tier::Hello hello;
  hello.staging_slots = slots_;
  const bool sent = tier::SendHello(fd_, hello, memfd_);
  tier::HelloReply reply;
  size_t got = 0;
  while (sent && got < sizeof(reply) && WaitFor(fd_, POLLIN, timeouts_.connect)) {
    const ssize_t r = recv(fd_, reinterpret_cast<char*>(&reply) + got, sizeof(reply) - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got != sizeof(reply)) return "the daemon did not answer on the tier socket";
  if (reply.status != tier::Status::kOk) {
    return reply.status == tier::Status::kDenied ? "the daemon refused the tier connection"
                                                 : "the daemon rejected the tier hello";
  }
  tenant_ = reply.tenant;
  capacity_ = reply.capacity_bytes;
  return nullptr;
}

bool TierChannel::Reconnect() {
  if (!broken_) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_reconnect_) return false;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  partial_bytes_ = 0;
  const char* error = Handshake();
  if (error != nullptr) {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    next_reconnect_ = now + reconnect_backoff_;
    MEMSHIM_LOG(kInfo, "cannot reopen the daemon's tier channel: %s; next try in %lld ms", error,
                static_cast<long long>(reconnect_backoff_.count()));
    reconnect_backoff_ = std::min(2 * reconnect_backoff_, kReconnectBackoffMax);
    return false;
  }
  broken_ = false;
  reconnect_backoff_ = kReconnectBackoffMin;
  MEMSHIM_LOG(kInfo, "reopened the daemon's tier channel");
  return true;
}

TierChannel::TierChannel(std::string socket_path, int memfd, uint8_t* staging, uint32_t slots,
                         const TierChannelTimeouts& timeouts)
    : socket_path_(std::move(socket_path)),
      memfd_(memfd),
      staging_(staging),
      slots_(slots),
      timeouts_(timeouts),
      load_state_(slots, 0),
      load_result_(slots, SpillResult::kOk) {}

TierChannel::~TierChannel() {
  if (fd_ >= 0) close(fd_);  // the daemon discards this process's slabs
  close(memfd_);
  munmap(staging_, uint64_t{slots_} * tier::kStagingSlotBytes);
}

void* TierChannel::staging(uint32_t slot) {
  return staging_ + uint64_t{slot} * tier::kStagingSlotBytes;
}

uint64_t TierChannel::capacity_bytes() const {
  MutexLock lock(&mu_);
  return capacity_;
}

uint64_t TierChannel::tenant() const {
  MutexLock lock(&mu_);
  return tenant_;
}

size_t TierChannel::live_slabs() const {
  MutexLock lock(&mu_);
  return slabs_.size();
}

void TierChannel::Break() {
  if (!broken_ && !slabs_.empty()) {
    MEMSHIM_LOG(kError,
                "lost the daemon's tier channel; %zu spilled chunks are gone (their accesses "
                "fail)",
                slabs_.size());
  } else if (!broken_) {
    MEMSHIM_LOG(kInfo, "the daemon's tier channel closed while it held nothing of this process");
  }
  slabs_.clear();  // gone with the connection (Note [reopening])
  broken_ = true;
  for (size_t s = 0; s < load_state_.size(); ++s) {
    if (load_state_[s] == 1) {
      load_state_[s] = 2;
      load_result_[s] = SpillResult::kBroken;
    }
  }
  outstanding_.clear();
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

bool TierChannel::Send(const tier::Request& r) {
  if (broken_) return false;
  if (!SendAll(fd_, &r, sizeof(r), timeouts_.request)) {
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
      // Note [slow or gone]: a daemon that is gone closes the socket, which wakes this wait at
      // once (EOF); a slow one (stopped, stalled, overloaded) is waited for up to the deadline.
      if (WaitFor(fd_, POLLIN, timeouts_.request)) continue;
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
  MutexLock lock(&mu_);
  SpillResult r = StoreOnce(slot, id);
  // The daemon closed an idle channel, or went away and may be back: reopen it and retry once.
  if (r == SpillResult::kBroken && Reconnect()) r = StoreOnce(slot, id);
  return r;
}

SpillResult TierChannel::StoreOnce(uint32_t slot, uint64_t* id) {
  store_done_ = false;
  if (!Send({tier::Op::kStore, slot, 0})) return SpillResult::kBroken;
  while (!store_done_) {
    if (!ReadOneReply(/*wait=*/true)) return SpillResult::kBroken;
  }
  if (store_reply_.status != tier::Status::kOk) return ResultOf(store_reply_.status);
  *id = next_id_++;
  slabs_.emplace(*id, store_reply_.id);
  return SpillResult::kOk;
}

SpillResult TierChannel::StartLoad(uint64_t id, uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot >= slots_ || load_state_[slot] != 0) return SpillResult::kFailed;
  if (broken_) return SpillResult::kBroken;
  const auto slab = slabs_.find(id);
  if (slab == slabs_.end()) {  // lost with an earlier connection, or never stored
    load_state_[slot] = 2;
    load_result_[slot] = SpillResult::kFailed;
    return SpillResult::kOk;
  }
  if (!Send({tier::Op::kLoad, slot, slab->second})) return SpillResult::kBroken;
  load_state_[slot] = 1;
  return SpillResult::kOk;
}

SpillResult TierChannel::FinishLoad(uint32_t slot, bool wait) {
  MutexLock lock(&mu_);
  if (slot >= slots_ || load_state_[slot] == 0) return SpillResult::kFailed;
  while (load_state_[slot] == 1) {
    if (!ReadOneReply(wait)) {
      if (load_state_[slot] == 1 && !broken_) return SpillResult::kPending;
    }
  }
  load_state_[slot] = 0;
  return load_result_[slot];
}

void TierChannel::WaitLoad(uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot >= slots_) return;
  // A broken channel finishes every pending load (Break()).
  while (load_state_[slot] == 1 && ReadOneReply(/*wait=*/true)) {
  }
}

void TierChannel::Discard(uint64_t id) {
  MutexLock lock(&mu_);
  const auto slab = slabs_.find(id);
  if (slab == slabs_.end()) return;  // gone already
  const uint64_t daemon_id = slab->second;
  slabs_.erase(slab);
  if (Send({tier::Op::kDiscard, 0, daemon_id})) {
    // Replies of discards carry nothing; drain what has arrived so the
    // daemon's send buffer never fills up with them.
    while (ReadOneReply(/*wait=*/false)) {
    }
  }
}

}  // namespace memvirt::shim

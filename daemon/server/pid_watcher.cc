#include "daemon/server/pid_watcher.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/mutex_lock.h"
#include "glog/logging.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace memvirt::daemon {
namespace {
constexpr uint64_t kWakeKey = ~uint64_t{0};
}

PidWatcher::PidWatcher(Callback on_exit) : on_exit_(std::move(on_exit)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0) << "epoll/eventfd: " << std::strerror(errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  CHECK_EQ(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev), 0);
  thread_ = std::thread([this] { Loop(); });
}

PidWatcher::~PidWatcher() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  MutexLock lock(&mu_);
  for (const auto& [key, fd] : pidfds_) close(fd);
  close(wake_fd_);
  close(epoll_fd_);
}

absl::Status PidWatcher::Watch(uint64_t key, pid_t pid) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("pidfd_open(", pid, "): ", std::strerror(errno)));
  }
  MutexLock lock(&mu_);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = key;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  if (auto it = pidfds_.find(key); it != pidfds_.end()) close(it->second);
  pidfds_[key] = fd;
  return absl::OkStatus();
}

void PidWatcher::Unwatch(uint64_t key) {
  MutexLock lock(&mu_);
  auto it = pidfds_.find(key);
  if (it == pidfds_.end()) return;
  close(it->second);  // Closing removes it from the epoll set.
  pidfds_.erase(it);
}

void PidWatcher::Loop() {
  epoll_event events[16];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, 16, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      PLOG(ERROR) << "epoll_wait";
      return;
    }
    std::vector<uint64_t> exited;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (key == kWakeKey) return;
      MutexLock lock(&mu_);
      auto it = pidfds_.find(key);
      if (it == pidfds_.end()) continue;  // Unwatched meanwhile.
      close(it->second);
      pidfds_.erase(it);
      exited.push_back(key);
    }
    for (uint64_t key : exited) on_exit_(key);
  }
}

}  // namespace memvirt::daemon

#include "daemon/server/accept_backoff.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "glog/logging.h"

namespace memvirt::daemon {

bool LogLimiter::Allow(absl::Time now, uint64_t* suppressed) {
  if (last_ != absl::InfinitePast() && now - last_ < interval_) {
    ++held_back_;
    return false;
  }
  *suppressed = held_back_;
  held_back_ = 0;
  last_ = now;
  return true;
}

namespace {
std::atomic<uint64_t> g_backoffs{0};
}  // namespace

uint64_t AcceptBackoff::TotalBackoffs() { return g_backoffs.load(std::memory_order_relaxed); }

absl::Duration AcceptBackoff::OnError(int err, absl::Time now) {
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED || err == EPROTO) {
    return absl::ZeroDuration();
  }
  g_backoffs.fetch_add(1, std::memory_order_relaxed);
  delay_ = delay_ == absl::ZeroDuration() ? kFirst : std::min(delay_ * 2, kMax);
  uint64_t suppressed = 0;
  if (log_.Allow(now, &suppressed)) {
    LOG(WARNING) << "accept on " << what_ << ": " << std::strerror(err) << "; retrying in "
                 << delay_ << " (" << suppressed << " similar lines left out)";
  }
  return delay_;
}

}  // namespace memvirt::daemon

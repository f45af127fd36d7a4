// AcceptBackoff: what an accept loop does when accept4() fails, and a rate limit for the log
// lines it writes.
//
// Note [accept backoff]
// A listening socket with a pending connection stays readable, so when accept4() fails for
// lack of file descriptors (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM), a loop that polls
// again at once spins at 100 % CPU and logs the same error at full speed. Instead the loop
// waits before it polls the listening socket again: 10 ms after the first such failure,
// doubling to 1 s while they go on, back to nothing after an accept succeeds. Transient
// errors (EAGAIN, EINTR, ECONNABORTED, EPROTO) are retried at once and never logged.
// The error is logged at most once per LogLimiter interval, with the number of lines left out.
//
// Thread safety: neither class is thread-safe; each accept loop owns its own (TotalBackoffs()
// is thread-safe).
#ifndef MEMVIRT_DAEMON_SERVER_ACCEPT_BACKOFF_H_
#define MEMVIRT_DAEMON_SERVER_ACCEPT_BACKOFF_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace memvirt::daemon {

// Lets one log line through per interval and counts the ones it held back.
class LogLimiter {
 public:
  explicit LogLimiter(absl::Duration interval) : interval_(interval) {}
  // True if a line may be written at `now`; *suppressed is then the number of lines held back
  // since the last one that went out.
  bool Allow(absl::Time now, uint64_t* suppressed);

 private:
  const absl::Duration interval_;
  absl::Time last_ = absl::InfinitePast();
  uint64_t held_back_ = 0;
};

class AcceptBackoff {
 public:
  static constexpr absl::Duration kFirst = absl::Milliseconds(10);
  static constexpr absl::Duration kMax = absl::Seconds(1);

  // `what` names the socket in log lines.
  explicit AcceptBackoff(std::string what) : what_(std::move(what)) {}
  // After accept4() failed with `err` at `now`: how long to wait before polling again (zero:
  // retry at once). Logs, rate-limited.
  absl::Duration OnError(int err, absl::Time now);
  void OnSuccess() { delay_ = absl::ZeroDuration(); }
  // Failures that backed off, over every accept loop of the process (for
  // memvirt_accept_backoffs_total). Thread-safe.
  static uint64_t TotalBackoffs();

 private:
  const std::string what_;
  absl::Duration delay_ = absl::ZeroDuration();
  LogLimiter log_{absl::Seconds(10)};
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_ACCEPT_BACKOFF_H_

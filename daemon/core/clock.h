// Clock: the daemon core's only source of time, so tests can drive deadlines and rates
// deterministically.
//
// Thread safety: every Clock implementation is safe to call from any thread.
#ifndef MEMVIRT_DAEMON_CORE_CLOCK_H_
#define MEMVIRT_DAEMON_CORE_CLOCK_H_

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mutex_lock.h"

namespace memvirt::daemon {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// Wall clock (absl::Now()).
class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance; never destroyed.
  static const Clock* Get();
};

// A clock that moves only when told to. Starts at the Unix epoch plus one day.
class FakeClock final : public Clock {
 public:
  absl::Time Now() const override {
    MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch() + absl::Hours(24);
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_CLOCK_H_

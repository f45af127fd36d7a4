#include "daemon/core/clock.h"

namespace memvirt::daemon {

const Clock* SystemClock::Get() {
  static const SystemClock* const kClock = new SystemClock();
  return kClock;
}

}  // namespace memvirt::daemon

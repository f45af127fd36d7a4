// LatencyHistogram: request durations in fixed Prometheus-style buckets (seconds).
//
// Thread safety: a plain value; the owner serializes access.
#ifndef MEMVIRT_DAEMON_SERVER_LATENCY_HISTOGRAM_H_
#define MEMVIRT_DAEMON_SERVER_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstdint>

#include "absl/time/time.h"

namespace memvirt::daemon {

struct LatencyHistogram {
  // Upper bounds of the buckets, seconds: a 2 MiB transfer takes ~1-10 ms on NVMe.
  static constexpr std::array<double, 12> kBounds = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                     0.05,   0.1,   0.2,   0.5,   1,    5};
  // counts[i]: samples <= kBounds[i] and > kBounds[i-1]; counts.back(): above every bound.
  std::array<uint64_t, kBounds.size() + 1> counts{};
  uint64_t samples = 0;
  double sum_seconds = 0;

  void Add(absl::Duration d) {
    const double s = absl::ToDoubleSeconds(d);
    size_t i = 0;
    while (i < kBounds.size() && s > kBounds[i]) ++i;
    ++counts[i];
    ++samples;
    sum_seconds += s;
  }
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_LATENCY_HISTOGRAM_H_

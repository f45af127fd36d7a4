#include "daemon/core/arbiter.h"

#include <algorithm>
#include <limits>

namespace memvirt::daemon {
namespace {

constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();

uint64_t CapOf(const ArbiterClaim& c) {
  uint64_t cap = c.demand_bytes == 0 ? kUnlimited : c.demand_bytes;
  if (c.quota_bytes != 0) cap = std::min(cap, c.quota_bytes);
  return cap;
}

// Sum of clamp(level, lo_i, hi_i), saturating at kUnlimited.
uint64_t FillAt(uint64_t level, const std::vector<uint64_t>& lo, const std::vector<uint64_t>& hi) {
  uint64_t sum = 0;
  for (size_t i = 0; i < lo.size(); ++i) {
    const uint64_t v = std::clamp(level, lo[i], hi[i]);
    if (sum > kUnlimited - v) return kUnlimited;
    sum += v;
  }
  return sum;
}

// Largest level L with FillAt(L) <= capacity; REQUIRES FillAt(0) <= capacity.
std::vector<uint64_t> WaterFill(uint64_t capacity, const std::vector<uint64_t>& lo,
                                const std::vector<uint64_t>& hi) {
  uint64_t low = 0;
  uint64_t high = 0;
  for (uint64_t h : hi) high = std::max(high, h);
  if (FillAt(high, lo, hi) > capacity) {
    // Invariant: FillAt(low) <= capacity < FillAt(high).
    while (high - low > 1) {
      const uint64_t mid = low + (high - low) / 2;
      if (FillAt(mid, lo, hi) <= capacity) {
        low = mid;
      } else {
        high = mid;
      }
    }
  } else {
    low = high;
  }
  std::vector<uint64_t> out(lo.size());
  for (size_t i = 0; i < lo.size(); ++i) out[i] = std::clamp(low, lo[i], hi[i]);
  return out;
}

}  // namespace

std::vector<uint64_t> ComputeBudgets(uint64_t capacity_bytes,
                                     absl::Span<const ArbiterClaim> claims) {
  std::vector<uint64_t> caps(claims.size());
  std::vector<uint64_t> floors(claims.size());
  uint64_t floor_sum = 0;
  bool floors_fit = true;
  for (size_t i = 0; i < claims.size(); ++i) {
    caps[i] = CapOf(claims[i]);
    floors[i] = std::min(claims[i].min_bytes, caps[i]);
    if (floor_sum > kUnlimited - floors[i] || floor_sum + floors[i] > capacity_bytes) {
      floors_fit = false;
    } else {
      floor_sum += floors[i];
    }
  }
  if (!floors_fit) {
    const std::vector<uint64_t> zeros(claims.size(), 0);
    return WaterFill(capacity_bytes, zeros, floors);
  }
  return WaterFill(capacity_bytes, floors, caps);
}

}  // namespace memvirt::daemon

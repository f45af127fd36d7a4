// Bandwidth model of one DMA copy engine (one per device and direction).
//
// Note [bandwidth model]: a copy of N bytes occupies the engine for N / (GB/s * 1e9) seconds.
// Transfer() books the engine from max(now, busy_until) for that long, performs the memcpy,
// then sleeps until the booked end; concurrent copies on one engine therefore serialize, while
// the H2D and D2H engines of a device overlap. A rate of 0 means unthrottled (plain memcpy).
// The model is exact as long as memcpy itself is faster than the modelled link.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_COPY_ENGINE_H_
#define MEMSIM_SRC_COPY_ENGINE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace memsim {

class CopyEngine {
 public:
  using Clock = std::chrono::steady_clock;

  explicit CopyEngine(double gbps) : bytes_per_second_(gbps * 1e9) {}

  // Reserves the engine for `bytes` and returns when the booked slot ends.
  Clock::time_point Book(size_t bytes);

  // Copies `bytes` from src to dst, taking at least the modelled time. May fault (run it
  // under RunGuarded when an address can be unmapped).
  void Transfer(void* dst, const void* src, size_t bytes);

  bool throttled() const { return bytes_per_second_ > 0; }
  // Bytes booked so far (0 when unthrottled: nothing is booked).
  uint64_t booked_bytes();

 private:
  const double bytes_per_second_;
  std::mutex mu_;
  Clock::time_point busy_until_{};
  uint64_t booked_bytes_ = 0;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_COPY_ENGINE_H_

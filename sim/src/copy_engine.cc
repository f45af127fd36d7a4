#include "copy_engine.h"

#include <cstring>
#include <thread>

namespace memsim {

CopyEngine::Clock::time_point CopyEngine::Book(size_t bytes) {
  const auto now = Clock::now();
  if (!throttled()) return now;
  const auto duration = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(static_cast<double>(bytes) / bytes_per_second_));
  std::lock_guard<std::mutex> lock(mu_);
  const auto start = busy_until_ > now ? busy_until_ : now;
  busy_until_ = start + duration;
  booked_bytes_ += bytes;
  return busy_until_;
}

uint64_t CopyEngine::booked_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return booked_bytes_;
}

void CopyEngine::Transfer(void* dst, const void* src, size_t bytes) {
  const auto done_at = Book(bytes);
  if (bytes > 0) std::memmove(dst, src, bytes);
  if (throttled()) std::this_thread::sleep_until(done_at);
}

}  // namespace memsim

#include "capacity.h"

namespace memsim {

bool LocalCapacity::TryCharge(uint64_t bytes) {
  uint64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > capacity_ || used > capacity_ - bytes) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  return true;
}

void LocalCapacity::Release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

}  // namespace memsim

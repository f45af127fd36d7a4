// A stream-ordered memory pool (cuMemPoolCreate / the device's default pool).
//
// Note [pools]: the sim backs every pool allocation with its own cuMemAlloc-style range, charged
// to device capacity when cuMemAllocAsync is called and returned when the stream reaches the
// matching cuMemFreeAsync. There is no caching, so cuMemPoolTrimTo has nothing to trim and the
// reserved and used counters are equal.
//
// Thread safety: thread-safe (atomics; attribute writes are plain values under the API's
// relaxed semantics).
#ifndef MEMSIM_SRC_MEM_POOL_H_
#define MEMSIM_SRC_MEM_POOL_H_

#include <atomic>
#include <cstdint>

#include "cuda_api.h"

namespace memsim {

class Device;

class MemPool {
 public:
  MemPool(Device* device, const CUmemPoolProps& props) : device_(device), props_(props) {}
  Device* device() const { return device_; }
  const CUmemPoolProps& props() const { return props_; }
  CUmemoryPool handle() { return reinterpret_cast<CUmemoryPool>(this); }

  std::atomic<uint64_t> used{0};
  std::atomic<uint64_t> used_high{0};
  std::atomic<uint64_t> release_threshold{0};

  void Add(uint64_t bytes) {
    const uint64_t now = used.fetch_add(bytes) + bytes;
    uint64_t high = used_high.load();
    while (now > high && !used_high.compare_exchange_weak(high, now)) {
    }
  }

 private:
  Device* const device_;
  const CUmemPoolProps props_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_MEM_POOL_H_

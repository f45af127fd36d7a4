// A SpillTier for unit tests (SpillManagerTest, ShimCoreSpillTest): stores
// copies in memory; a load completes at FinishLoad, or, with slow_loads, only
// once waited for (FinishLoad(wait = true) or WaitLoad()), and during_wait
// runs at the first such wait; during_store runs at the next Store().
// Failure switches and counters.
//
// Thread safety: the calls are thread-safe, as the core makes some without
// its lock (Note [demotion outside the lock] in spill_manager.h); the hooks
// run without the tier's mutex. The switches, hooks and counters are set and
// read by the test while no core calls the tier.
#ifndef MEMVIRT_SHIM_TESTING_MEMORY_SPILL_TIER_H_
#define MEMVIRT_SHIM_TESTING_MEMORY_SPILL_TIER_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "shim/core/shim_core_test_fixture.h"  // Checksum, kMiB
#include "shim/core/spill_tier.h"

namespace memvirt::shim::testing {

class MemorySpillTier final : public SpillTier {
 public:
  // `slots` staging buffers; Store() answers kNoSpace once `capacity` bytes
  // are stored.
  explicit MemorySpillTier(uint32_t slots, uint64_t capacity = 64 * kMiB) : capacity_(capacity) {
    for (uint32_t s = 0; s < slots; ++s) {
      staging_.push_back(static_cast<uint8_t*>(std::aligned_alloc(4096, kChunkBytes)));
    }
    pending_.assign(slots, 0);
    waited_.assign(slots, false);
  }
  ~MemorySpillTier() override {
    for (uint8_t* p : staging_) std::free(p);
  }
  MemorySpillTier(const MemorySpillTier&) = delete;
  MemorySpillTier& operator=(const MemorySpillTier&) = delete;

  uint32_t staging_slots() const override { return static_cast<uint32_t>(staging_.size()); }
  void* staging(uint32_t slot) override { return staging_[slot]; }
  uint64_t capacity_bytes() const override { return capacity_; }
  SpillResult Store(uint32_t slot, uint64_t* id) override {
    if (during_store) std::exchange(during_store, nullptr)();
    if (store_delay.count() > 0) std::this_thread::sleep_for(store_delay);
    std::lock_guard<std::mutex> lock(mu_);
    if (no_space || stored_.size() * kChunkBytes >= capacity_) return SpillResult::kNoSpace;
    if (fail_stores) return SpillResult::kFailed;
    *id = next_id_++;
    stored_[*id].assign(staging_[slot], staging_[slot] + kChunkBytes);
    ++stores;
    return SpillResult::kOk;
  }
  SpillResult StartLoad(uint64_t id, uint32_t slot) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_[slot] != 0) return SpillResult::kFailed;
    pending_[slot] = id;
    ++started_loads;
    return SpillResult::kOk;
  }
  SpillResult FinishLoad(uint32_t slot, bool wait) override {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t id = pending_[slot];
    if (slow_loads && id != 0 && !waited_[slot]) {
      if (!wait) return SpillResult::kPending;
      lock.unlock();
      RunWaitHook();
      lock.lock();
    }
    pending_[slot] = 0;
    waited_[slot] = false;
    auto it = stored_.find(id);
    if (id == 0 || it == stored_.end() || fail_loads) return SpillResult::kFailed;
    std::memcpy(staging_[slot], it->second.data(), kChunkBytes);
    ++loads;
    return SpillResult::kOk;
  }
  void WaitLoad(uint32_t slot) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++wait_loads;
    if (pending_[slot] == 0) return;
    lock.unlock();
    RunWaitHook();
    lock.lock();
    waited_[slot] = true;
  }
  void Discard(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    stored_.erase(id);
  }

  size_t stored() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stored_.size();
  }
  // The checksum of stored copy `id`, 0 if there is none.
  uint64_t StoredChecksum(uint64_t id) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = stored_.find(id);
    return it == stored_.end() ? 0 : Checksum(it->second.data(), kChunkBytes);
  }
  // The checksums of every stored copy, sorted.
  std::vector<uint64_t> StoredChecksums() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t> sums;
    for (const auto& [id, bytes] : stored_) sums.push_back(Checksum(bytes.data(), kChunkBytes));
    std::sort(sums.begin(), sums.end());
    return sums;
  }

  bool no_space = false;
  bool fail_stores = false;
  bool fail_loads = false;
  bool slow_loads = false;
  std::function<void()> during_wait;
  std::function<void()> during_store;
  std::chrono::microseconds store_delay{0};  // each Store() takes at least this long
  int stores = 0;                            // successful Store() calls
  int started_loads = 0;                     // StartLoad() calls accepted
  int loads = 0;                             // loads that delivered their bytes
  int wait_loads = 0;                        // WaitLoad() calls

 private:
  void RunWaitHook() {
    if (during_wait) std::exchange(during_wait, nullptr)();
  }

  mutable std::mutex mu_;
  const uint64_t capacity_;
  std::vector<uint8_t*> staging_;
  std::vector<uint64_t> pending_;
  std::vector<bool> waited_;  // per slot: its pending load was waited for
  std::map<uint64_t, std::vector<uint8_t>> stored_;
  uint64_t next_id_ = 1;
};

}  // namespace memvirt::shim::testing

#endif  // MEMVIRT_SHIM_TESTING_MEMORY_SPILL_TIER_H_

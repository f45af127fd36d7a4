// HostLedger: the process's host-tier budget, in 2 MiB slots, shared by the
// cores of all its devices (Note [shared host budget]).
//
// Note [shared host budget]
//   MEMSHIM_HOST_BUDGET (or the daemon's host budget for the process) is one
//   budget for the process, however many devices it uses: every device's core
//   draws its host slots from one ledger. The limit bounds the slots that hold
//   data (charged by AcquireHost, returned by ReleaseHost), summed over the
//   cores; a core that finds the ledger full demotes its own host chunks to
//   the spill tier, as with a full host tier of its own; if it has none to
//   demote while other cores hold slots, it asks them to give some back (Note
//   [host slots of other cores] in host_peers.h), and goes on without a slot,
//   as with a full host tier, only if that frees nothing. Freed slots are kept
//   cached by their core for reuse only while the slots the process holds
//   (holding data or cached) stay within the limit; beyond it a freed slot's
//   memory is given back at once. So the host memory the process holds exceeds
//   the limit only by slots other cores keep cached when one core creates a
//   slot, and each later release gives memory back until it is within again.
//   The first core's budget sets the limit (InitLimit); the daemon's
//   HOST_BUDGET directive changes it for all cores (SetLimit), and each core
//   then demotes its own chunks while the total is over the limit. What the
//   cores may allocate beyond their device budgets is admitted against this
//   limit (plus the spill capacity) by the OverflowLedger (Note [shared
//   admission] in overflow_ledger.h).
//
// Thread safety: thread-safe (atomics); cores call it under their own locks.
#ifndef MEMVIRT_SHIM_CORE_HOST_LEDGER_H_
#define MEMVIRT_SHIM_CORE_HOST_LEDGER_H_

#include <atomic>
#include <cstdint>

namespace memvirt::shim {

class HostLedger {
 public:
  // Sets the limit unless it is set already. Returns the limit in force.
  uint32_t InitLimit(uint32_t slots) {
    int64_t unset = -1;
    limit_.compare_exchange_strong(unset, slots, std::memory_order_acq_rel);
    return limit();
  }
  void SetLimit(uint32_t slots) { limit_.store(slots, std::memory_order_release); }
  // 0 until InitLimit or SetLimit.
  uint32_t limit() const {
    const int64_t l = limit_.load(std::memory_order_acquire);
    return l < 0 ? 0 : static_cast<uint32_t>(l);
  }

  // A slot starts holding data: false (nothing charged) if the limit is reached.
  bool TryCharge() {
    uint32_t n = in_use_.load(std::memory_order_relaxed);
    do {
      if (n >= limit()) return false;
    } while (!in_use_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
    return true;
  }
  // REQUIRES: a slot charged by TryCharge.
  void Uncharge() { in_use_.fetch_sub(1, std::memory_order_acq_rel); }
  uint32_t in_use() const { return in_use_.load(std::memory_order_acquire); }
  // Slots in use beyond the limit (after a lowered limit).
  uint32_t over_limit() const {
    const uint32_t n = in_use(), l = limit();
    return n > l ? n - l : 0;
  }

  // Slots whose memory exists (in use or cached), summed over the cores.
  void AddHeld(int32_t delta) { held_.fetch_add(delta, std::memory_order_acq_rel); }
  uint32_t held() const {
    const int64_t h = held_.load(std::memory_order_acquire);
    return h < 0 ? 0 : static_cast<uint32_t>(h);
  }
  bool held_over_limit() const { return held() > limit(); }

 private:
  std::atomic<int64_t> limit_{-1};  // -1: not set yet
  std::atomic<uint32_t> in_use_{0};
  std::atomic<int64_t> held_{0};
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_HOST_LEDGER_H_

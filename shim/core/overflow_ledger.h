// OverflowLedger: the chunks the cores of a process have committed beyond
// their own device budgets, admitted against the host budget and spill
// capacity they share (Note [shared admission]).
//
// Note [shared admission]
//   A core admits an allocation (cuMemAlloc, cuMemAllocPitch, cuMemCreate)
//   only if the process can hold it, so that the allocation that crosses
//   the line fails with CUDA_ERROR_OUT_OF_MEMORY where applications expect
//   and handle it (PyTorch's caching allocator frees its cache and
//   retries), not at a later page-out in the middle of a launch or copy.
//   Two bounds hold:
//   * per core: its committed chunks stay within its virtual capacity,
//     device budget + host budget + spill capacity (BlockAllocator's
//     max_committed_chunks(), what cuMemGetInfo reports as total);
//   * per process: the chunks every core has committed beyond its own
//     device budget, summed, stay within the host budget and the spill
//     capacity, which all cores share (Note [shared host budget] in
//     host_ledger.h). Each core's BlockAllocator charges its excess here
//     when it commits chunks and releases it when they are freed.
//   So the devices together never admit more than sum(device budgets) +
//   host budget + spill capacity. With one core the second bound is the
//   first one.
//   * The host part is the HostLedger's limit in force: a HOST_BUDGET
//     directive that lowers it lowers what later allocations are admitted
//     against; chunks admitted earlier stay admitted (the ledger may stand
//     over its capacity until they are freed, as the host ledger may).
//   * The spill capacity is counted once per process: every core's tier
//     channel reports the same store (InitSpillChunks keeps the first).
//     Each core with a spill tier holds back as many chunks of it as it has
//     staging buffers (AddSpillReserve): at full capacity a promotion makes
//     room by demoting a host chunk first, and a promoted chunk's stored
//     copy is released only once the operation's fills are committed (Note
//     [failed transitions] in shim_core.h), so chunks could not move through
//     an NVMe tier filled to the last chunk and admitted data could no longer
//     be reached.
//   * A core's own part is the device budget it was created with, the one
//     its virtual capacity holds; later device budget directives move
//     chunks between the tiers and do not change admission.
//   cuMemGetInfo's free is what the next allocation may commit under both
//   bounds.
//
// Thread safety: thread-safe (atomics, no lock). Cores call it under their
// own locks; it takes no lock and calls nothing, so it has no place in any
// lock order.
#ifndef MEMVIRT_SHIM_CORE_OVERFLOW_LEDGER_H_
#define MEMVIRT_SHIM_CORE_OVERFLOW_LEDGER_H_

#include <atomic>
#include <cstdint>

#include "shim/core/host_ledger.h"

namespace memvirt::shim {

class OverflowLedger {
 public:
  // `host` is the process's host budget (not owned; outlives this ledger).
  explicit OverflowLedger(const HostLedger* host) : host_(host) {}
  OverflowLedger(const OverflowLedger&) = delete;
  OverflowLedger& operator=(const OverflowLedger&) = delete;

  // Sets the spill capacity, in chunks, unless it is set already. Returns
  // the one in force.
  uint64_t InitSpillChunks(uint64_t chunks) {
    int64_t unset = -1;
    spill_.compare_exchange_strong(unset, static_cast<int64_t>(chunks), std::memory_order_acq_rel);
    return spill_chunks();
  }
  uint64_t spill_chunks() const {
    const int64_t s = spill_.load(std::memory_order_acquire);
    return s < 0 ? 0 : static_cast<uint64_t>(s);
  }
  // Spill chunks a core holds back for moving chunks through a full tier
  // (given back with a negative count when the core goes away).
  void AddSpillReserve(int64_t chunks) { reserve_.fetch_add(chunks, std::memory_order_acq_rel); }
  // Host budget in force + spill capacity less the reserves, in chunks.
  uint64_t capacity() const {
    const uint64_t spill = spill_chunks();
    const int64_t reserve = reserve_.load(std::memory_order_acquire);
    const uint64_t held_back = reserve < 0 ? 0 : static_cast<uint64_t>(reserve);
    return host_->limit() + (spill > held_back ? spill - held_back : 0);
  }

  // Admits `chunks` more beyond the cores' device budgets: false (nothing
  // charged) if they do not fit in capacity().
  bool TryCharge(uint64_t chunks) {
    uint64_t n = charged_.load(std::memory_order_relaxed);
    do {
      if (n + chunks > capacity()) return false;
    } while (!charged_.compare_exchange_weak(n, n + chunks, std::memory_order_acq_rel));
    return true;
  }
  // REQUIRES: `chunks` charged by TryCharge and not released yet.
  void Release(uint64_t chunks) { charged_.fetch_sub(chunks, std::memory_order_acq_rel); }
  uint64_t charged() const { return charged_.load(std::memory_order_acquire); }
  // What TryCharge admits now (0 while over a lowered capacity).
  uint64_t available() const {
    const uint64_t c = charged(), cap = capacity();
    return cap > c ? cap - c : 0;
  }

 private:
  const HostLedger* const host_;
  std::atomic<int64_t> spill_{-1};  // -1: not set yet
  std::atomic<int64_t> reserve_{0};
  std::atomic<uint64_t> charged_{0};
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_OVERFLOW_LEDGER_H_

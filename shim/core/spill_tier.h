// SpillTier: storage below the host tier (the daemon's NVMe tier), as the
// core sees it: 2 MiB chunks stored from and loaded into staging buffers
// that the tier shares with its backing store.
//
// The core copies a host-tier chunk into a staging buffer (device-to-host
// copy on its copy stream), Store()s it and then frees the host slot; to
// bring it back it loads the copy into a staging buffer and copies that to
// a device chunk or host slot. Loads may run ahead of use (prefetch):
// StartLoad() returns at once and FinishLoad() collects the outcome.
//
// Thread safety: the core's SpillManager (spill_manager.h) makes every call
// but WaitLoad() under the core's mutex; WaitLoad() is made without it (Note
// [waits outside the lock] in shim_core.h), so an implementation serializes
// it against the others. The implementation is owned by the ControlPlane
// that hands it out and outlives the core.
#ifndef MEMVIRT_SHIM_CORE_SPILL_TIER_H_
#define MEMVIRT_SHIM_CORE_SPILL_TIER_H_

#include <cstdint>

namespace memvirt::shim {

enum class SpillResult {
  kOk,
  kPending,  // FinishLoad(wait = false): not finished yet
  kNoSpace,  // Store: no space; the caller's data stays where it is
  kFailed,   // I/O error or checksum mismatch: the stored copy is unreadable now
  kBroken,   // the channel to the store is gone; every stored copy is lost
};

class SpillTier {
 public:
  virtual ~SpillTier() = default;

  // Staging buffers: page-aligned, kChunkBytes each, valid for the tier's
  // lifetime.
  virtual uint32_t staging_slots() const = 0;
  virtual void* staging(uint32_t slot) = 0;
  // Bytes the store can hold (shared with other processes).
  virtual uint64_t capacity_bytes() const = 0;

  // Stores the contents of staging `slot`; on kOk *id names the copy. Blocks
  // until the data is stored. REQUIRES: no load into `slot` is pending.
  virtual SpillResult Store(uint32_t slot, uint64_t* id) = 0;
  // Starts reading copy `id` into staging `slot`. REQUIRES: `slot` is not
  // in use by another pending load. kOk means started.
  virtual SpillResult StartLoad(uint64_t id, uint32_t slot) = 0;
  // The outcome of the load started into `slot`; with wait = false kPending
  // while it runs. After any other result the slot is free again.
  virtual SpillResult FinishLoad(uint32_t slot, bool wait) = 0;
  // Blocks until no load into `slot` is running (one that finished keeps its
  // outcome for FinishLoad); returns at once if none is. Thread-safe against
  // the other calls, which it may hold up while it waits.
  virtual void WaitLoad(uint32_t slot) = 0;
  // Releases copy `id` (no reply awaited).
  virtual void Discard(uint64_t id) = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_SPILL_TIER_H_

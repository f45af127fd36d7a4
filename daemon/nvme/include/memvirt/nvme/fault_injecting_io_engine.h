// FaultInjectingIoEngine: a ForwardingIoEngine with switches that make requests fail the way a
// real device or file system does, for testing the error paths of everything above the engine.
//
//   SetNoSpaceAfter(n)     writes succeed until n more bytes have been written; a write that
//                          does not fit fails with ENOSPC (nothing of it is written).
//   AddReadError(range)    reads overlapping the range fail with the given errno (EIO default).
//   AddWriteError(range)   the same for writes.
//   SetShortWrites(mode)   writes transfer only their first `keep_bytes`; kReportError completes
//                          them with an error (a torn write), kSilent reports success anyway
//                          (a lying device: only checksums can tell).
//   SetLatency(d)          every completion is delivered no earlier than d after its submission.
//
// Injected failures are produced by the wrapper; the target sees only what is forwarded.
// Ownership: the target is not owned. Thread safety: internally locked; switches may be flipped
// from any thread and apply to requests submitted afterwards.
#ifndef MEMVIRT_NVME_FAULT_INJECTING_IO_ENGINE_H_
#define MEMVIRT_NVME_FAULT_INJECTING_IO_ENGINE_H_

#include <cerrno>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "memvirt/nvme/forwarding_io_engine.h"

namespace memvirt::nvme {

struct FileRange {
  int file_index = 0;
  uint64_t offset = 0;
  uint64_t length = std::numeric_limits<uint64_t>::max();
  bool Overlaps(const IoRequest& r) const;
};

enum class ShortWriteMode { kOff, kReportError, kSilent };

struct FaultCounters {
  uint64_t injected_no_space = 0;
  uint64_t injected_read_errors = 0;
  uint64_t injected_write_errors = 0;
  uint64_t short_writes = 0;
};

class FaultInjectingIoEngine final : public ForwardingIoEngine {
 public:
  explicit FaultInjectingIoEngine(IoEngine* target) : ForwardingIoEngine(target) {}

  void SetNoSpaceAfter(uint64_t bytes);
  void AddReadError(FileRange range, int err = EIO);
  void AddWriteError(FileRange range, int err = EIO);
  void SetShortWrites(ShortWriteMode mode, size_t keep_bytes = kDirectIoAlignment);
  void SetLatency(absl::Duration latency);
  void ClearFaults();
  FaultCounters counters() const;

  absl::Status Submit(absl::Span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) override;
  size_t outstanding() const override;

 private:
  struct Forwarded {
    uint64_t caller_tag;
    size_t caller_length;
    ShortWriteMode short_mode;
    absl::Time ready_at;
  };
  // Returns the errno to inject for `r`, or 0 to forward it. Charges the ENOSPC budget.
  int InjectedErrno(const IoRequest& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rewrites a completion of a forwarded request into the caller's terms.
  IoCompletion Translate(const IoCompletion& c, absl::Time* ready_at)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::optional<uint64_t> no_space_budget_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<FileRange, int>> read_errors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<FileRange, int>> write_errors_ ABSL_GUARDED_BY(mu_);
  ShortWriteMode short_mode_ ABSL_GUARDED_BY(mu_) = ShortWriteMode::kOff;
  size_t short_keep_ ABSL_GUARDED_BY(mu_) = kDirectIoAlignment;
  absl::Duration latency_ ABSL_GUARDED_BY(mu_);
  FaultCounters counters_ ABSL_GUARDED_BY(mu_);
  uint64_t next_tag_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Forwarded> forwarded_ ABSL_GUARDED_BY(mu_);
  std::deque<IoCompletion> injected_ ABSL_GUARDED_BY(mu_);
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_FAULT_INJECTING_IO_ENGINE_H_

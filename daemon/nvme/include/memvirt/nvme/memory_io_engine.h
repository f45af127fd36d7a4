// MemoryIoEngine: an IoEngine whose files are byte vectors in memory. Requests complete during
// Submit(); Reap() hands the completions out. Used by unit tests of everything above the engine,
// alone or under FaultInjectingIoEngine.
//
// Thread safety: internally locked (absl::Mutex); see io_engine.h for the reaping contract.
#ifndef MEMVIRT_NVME_MEMORY_IO_ENGINE_H_
#define MEMVIRT_NVME_MEMORY_IO_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "memvirt/nvme/io_engine.h"

namespace memvirt::nvme {

class MemoryIoEngine final : public IoEngine {
 public:
  // One zero-filled in-memory file per entry of `file_sizes`. With `enforce_direct_alignment`
  // the engine reports direct_io() and rejects misaligned requests exactly like O_DIRECT.
  explicit MemoryIoEngine(std::vector<uint64_t> file_sizes, bool enforce_direct_alignment = true);

  absl::Status Submit(absl::Span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) override;
  size_t outstanding() const override;
  int file_count() const override { return static_cast<int>(files_.size()); }
  uint64_t file_size(int file_index) const override { return files_[file_index].size(); }
  bool direct_io() const override { return direct_; }
  std::string description() const override { return "memory"; }

  // Direct access to a file's bytes, e.g. to corrupt data behind the engine's back.
  // REQUIRES: no request is outstanding on that file while the span is used.
  absl::Span<uint8_t> file_bytes(int file_index) { return absl::MakeSpan(files_[file_index]); }

 private:
  const bool direct_;
  std::vector<std::vector<uint8_t>> files_;  // sizes fixed at construction
  mutable absl::Mutex mu_;
  std::deque<IoCompletion> done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_MEMORY_IO_ENGINE_H_

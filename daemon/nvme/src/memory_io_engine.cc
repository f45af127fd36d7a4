#include "memvirt/nvme/memory_io_engine.h"

#include <cstring>

namespace memvirt::nvme {

MemoryIoEngine::MemoryIoEngine(std::vector<uint64_t> file_sizes, bool enforce_direct_alignment)
    : direct_(enforce_direct_alignment) {
  files_.reserve(file_sizes.size());
  for (uint64_t size : file_sizes) files_.emplace_back(size, 0);
}

absl::Status MemoryIoEngine::Submit(absl::Span<const IoRequest> requests) {
  for (const IoRequest& r : requests) {
    if (absl::Status s = ValidateRequest(r); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  for (const IoRequest& r : requests) {
    uint8_t* file = files_[r.file_index].data() + r.offset;
    if (r.op == IoOp::kWrite) {
      std::memcpy(file, r.buffer, r.length);
    } else {
      std::memcpy(r.buffer, file, r.length);
    }
    done_.push_back({r.tag, r.op, absl::OkStatus(), r.length});
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> MemoryIoEngine::Reap(absl::Span<IoCompletion> out, absl::Duration timeout) {
  if (out.empty()) return 0;
  absl::MutexLock lock(&mu_);
  auto available = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !done_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&available), timeout);
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = std::move(done_.front());
    done_.pop_front();
  }
  return n;
}

size_t MemoryIoEngine::outstanding() const {
  absl::MutexLock lock(&mu_);
  return done_.size();
}

}  // namespace memvirt::nvme

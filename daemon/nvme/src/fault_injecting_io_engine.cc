#include "memvirt/nvme/fault_injecting_io_engine.h"

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "memvirt/nvme/errno_status.h"

namespace memvirt::nvme {

bool FileRange::Overlaps(const IoRequest& r) const {
  if (r.file_index != file_index) return false;
  const uint64_t end = length > std::numeric_limits<uint64_t>::max() - offset
                           ? std::numeric_limits<uint64_t>::max()
                           : offset + length;
  return r.offset < end && offset < r.offset + r.length;
}

void FaultInjectingIoEngine::SetNoSpaceAfter(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  no_space_budget_ = bytes;
}

void FaultInjectingIoEngine::AddReadError(FileRange range, int err) {
  absl::MutexLock lock(&mu_);
  read_errors_.emplace_back(range, err);
}

void FaultInjectingIoEngine::AddWriteError(FileRange range, int err) {
  absl::MutexLock lock(&mu_);
  write_errors_.emplace_back(range, err);
}

void FaultInjectingIoEngine::SetShortWrites(ShortWriteMode mode, size_t keep_bytes) {
  absl::MutexLock lock(&mu_);
  short_mode_ = mode;
  short_keep_ = keep_bytes;
}

void FaultInjectingIoEngine::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  latency_ = latency;
}

void FaultInjectingIoEngine::ClearFaults() {
  absl::MutexLock lock(&mu_);
  no_space_budget_.reset();
  read_errors_.clear();
  write_errors_.clear();
  short_mode_ = ShortWriteMode::kOff;
  latency_ = absl::ZeroDuration();
}

FaultCounters FaultInjectingIoEngine::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

int FaultInjectingIoEngine::InjectedErrno(const IoRequest& r) {
  const auto& errors = r.op == IoOp::kRead ? read_errors_ : write_errors_;
  for (const auto& [range, err] : errors) {
    if (range.Overlaps(r)) {
      ++(r.op == IoOp::kRead ? counters_.injected_read_errors : counters_.injected_write_errors);
      return err;
    }
  }
  if (r.op == IoOp::kWrite && no_space_budget_.has_value()) {
    if (r.length > *no_space_budget_) {
      ++counters_.injected_no_space;
      return ENOSPC;
    }
    *no_space_budget_ -= r.length;
  }
  return 0;
}

absl::Status FaultInjectingIoEngine::Submit(absl::Span<const IoRequest> requests) {
  for (const IoRequest& r : requests) {
    if (absl::Status s = ValidateRequest(r); !s.ok()) return s;
  }
  std::vector<IoRequest> forward;
  forward.reserve(requests.size());
  absl::MutexLock lock(&mu_);
  const absl::Time ready_at = absl::Now() + latency_;
  for (const IoRequest& r : requests) {
    if (int err = InjectedErrno(r); err != 0) {
      injected_.push_back({r.tag, r.op,
                           ErrnoToStatus(err, absl::StrCat("injected fault, file ", r.file_index,
                                                           " offset ", r.offset)),
                           0});
      continue;
    }
    IoRequest f = r;
    f.tag = next_tag_++;
    ShortWriteMode mode = ShortWriteMode::kOff;
    if (r.op == IoOp::kWrite && short_mode_ != ShortWriteMode::kOff && short_keep_ < r.length) {
      mode = short_mode_;
      f.length = short_keep_;
      ++counters_.short_writes;
    }
    forwarded_[f.tag] = {r.tag, r.length, mode, ready_at};
    if (f.length == 0) {
      // Nothing reaches the target: complete here as the torn write it models.
      injected_.push_back(Translate({f.tag, f.op, absl::OkStatus(), 0}, nullptr));
      continue;
    }
    forward.push_back(f);
  }
  if (forward.empty()) return absl::OkStatus();
  absl::Status s = target()->Submit(forward);
  if (!s.ok()) {
    for (const IoRequest& f : forward) forwarded_.erase(f.tag);
  }
  return s;
}

IoCompletion FaultInjectingIoEngine::Translate(const IoCompletion& c, absl::Time* ready_at) {
  auto it = forwarded_.find(c.tag);
  const Forwarded info = it->second;
  forwarded_.erase(it);
  if (ready_at != nullptr) *ready_at = info.ready_at;
  IoCompletion out = c;
  out.tag = info.caller_tag;
  if (c.status.ok() && info.short_mode == ShortWriteMode::kReportError) {
    out.status = absl::DataLossError(
        absl::StrCat("short write: ", c.bytes, " of ", info.caller_length, " bytes"));
  } else if (c.status.ok() && info.short_mode == ShortWriteMode::kSilent) {
    out.bytes = info.caller_length;
  }
  return out;
}

absl::StatusOr<size_t> FaultInjectingIoEngine::Reap(absl::Span<IoCompletion> out,
                                                    absl::Duration timeout) {
  if (out.empty()) return 0;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!injected_.empty()) {
        size_t n = 0;
        while (n < out.size() && !injected_.empty()) {
          out[n++] = std::move(injected_.front());
          injected_.pop_front();
        }
        return n;
      }
    }
    // Wait on the target in short slices so that failures injected by a concurrent Submit()
    // are picked up promptly.
    const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
    absl::StatusOr<size_t> n;
    if (target()->outstanding() > 0) {
      n = target()->Reap(out, std::min(left, absl::Milliseconds(2)));
    } else {
      n = 0;
      if (left > absl::ZeroDuration()) absl::SleepFor(std::min(left, absl::Milliseconds(1)));
    }
    if (!n.ok()) return n.status();
    if (*n > 0) {
      absl::Time latest = absl::InfinitePast();
      {
        absl::MutexLock lock(&mu_);
        for (size_t i = 0; i < *n; ++i) {
          absl::Time ready_at;
          out[i] = Translate(out[i], &ready_at);
          latest = std::max(latest, ready_at);
        }
      }
      const absl::Duration wait = latest - absl::Now();
      if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
      return *n;
    }
    if (absl::Now() >= deadline) return 0;
  }
}

size_t FaultInjectingIoEngine::outstanding() const {
  absl::MutexLock lock(&mu_);
  return forwarded_.size() + injected_.size();
}

}  // namespace memvirt::nvme

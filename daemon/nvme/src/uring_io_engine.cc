#include "memvirt/nvme/uring_io_engine.h"

#include <fcntl.h>
#include <liburing.h>

#include <algorithm>
#include <cerrno>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "memvirt/nvme/errno_status.h"
#include "transfer_progress.h"

namespace memvirt::nvme {

// A request with its progress. Lives in the pending queue or in a ring slot.
struct PendingOp {
  IoRequest request;
  size_t done = 0;
};

class UringIoEngine::Impl {
 public:
  Impl(std::vector<UringFile> files, const UringOptions& options)
      : files_(std::move(files)), options_(options) {}

  ~Impl() {
    if (ring_ready_) {
      std::vector<IoCompletion> sink(16);
      while (outstanding() > 0) {
        if (!Reap(absl::MakeSpan(sink), absl::Seconds(1)).ok()) break;
      }
      io_uring_queue_exit(&ring_);
    }
  }

  absl::Status Init() {
    direct_ = !files_.empty();
    for (const UringFile& f : files_) {
      const int flags = fcntl(f.fd, F_GETFL);
      if (flags < 0) return ErrnoToStatus(errno, "fcntl(F_GETFL)");
      if ((flags & O_DIRECT) == 0) direct_ = false;
    }
    const unsigned depth = std::max(1u, options_.queue_depth);
    io_uring_params params{};
    if (options_.io_poll) params.flags |= IORING_SETUP_IOPOLL;
    if (options_.sq_poll) {
      params.flags |= IORING_SETUP_SQPOLL;
      params.sq_thread_idle = 50;  // ms
    }
    // Twice the queue depth of CQ entries: completions of all slots always fit.
    params.flags |= IORING_SETUP_CQSIZE;
    params.cq_entries = 2 * depth;
    if (int rc = io_uring_queue_init_params(depth, &ring_, &params); rc < 0) {
      return ErrnoToStatus(rc, "io_uring_queue_init");
    }
    ring_ready_ = true;
    ext_arg_ = (ring_.features & IORING_FEAT_EXT_ARG) != 0;
    depth_ = depth;
    absl::MutexLock lock(&mu_);  // not shared yet; keeps the analysis exact
    slots_.resize(depth);
    free_slots_.reserve(depth);
    for (unsigned i = depth; i > 0; --i) free_slots_.push_back(i - 1);
    if (options_.register_files && !files_.empty()) {
      std::vector<int> fds;
      for (const UringFile& f : files_) fds.push_back(f.fd);
      files_registered_ =
          io_uring_register_files(&ring_, fds.data(), static_cast<unsigned>(fds.size())) == 0;
    }
    return absl::OkStatus();
  }

  absl::Status RegisterBuffers(absl::Span<const iovec> regions) {
    absl::MutexLock cq_lock(&cq_mu_);
    absl::MutexLock lock(&mu_);
    if (in_ring_ != 0 || !pending_.empty()) {
      return absl::FailedPreconditionError("RegisterBuffers with requests outstanding");
    }
    if (!regions_.empty()) {
      io_uring_unregister_buffers(&ring_);
      regions_.clear();
    }
    if (regions.empty()) return absl::OkStatus();
    if (int rc = io_uring_register_buffers(&ring_, regions.data(),
                                           static_cast<unsigned>(regions.size()));
        rc < 0) {
      return ErrnoToStatus(rc, "io_uring_register_buffers");
    }
    regions_.assign(regions.begin(), regions.end());
    return absl::OkStatus();
  }

  absl::Status Submit(absl::Span<const IoRequest> requests) {
    absl::MutexLock lock(&mu_);
    for (const IoRequest& r : requests) pending_.push_back({r, 0});
    // Once queued, requests belong to the engine: a kernel submission error is not reported
    // here (the caller would think nothing was queued) but by the next Reap(), which retries
    // the submission first.
    (void)Pump();
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) {
    if (out.empty()) return 0;
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock cq_lock(&cq_mu_);
    while (true) {
      if (absl::Status s = DrainCq(); !s.ok()) return s;
      {
        absl::MutexLock lock(&mu_);
        if (!ready_.empty()) {
          size_t n = 0;
          while (n < out.size() && !ready_.empty()) {
            out[n++] = std::move(ready_.front());
            ready_.pop_front();
          }
          return n;
        }
        // SQEs left unsubmitted by an earlier -EAGAIN/-EBUSY would never complete: push them.
        if (io_uring_sq_ready(&ring_) > 0) {
          const int rc = io_uring_submit(&ring_);
          if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
            return ErrnoToStatus(rc, "io_uring_submit");
          }
        }
        if (in_ring_ == 0 && pending_.empty()) {
          // Nothing can complete: behave like an idle wait without entering the kernel.
          mu_.AwaitWithDeadline(absl::Condition(this, &Impl::HasWork), deadline);
          if (in_ring_ == 0 && pending_.empty()) return 0;
          continue;
        }
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return 0;
      if (absl::Status s = WaitForCqe(left); !s.ok()) {
        if (absl::IsDeadlineExceeded(s)) return 0;
        return s;
      }
    }
  }

  size_t outstanding() const {
    absl::MutexLock lock(&mu_);
    return in_ring_ + pending_.size() + ready_.size();
  }

  const std::vector<UringFile>& files() const { return files_; }
  bool direct() const { return direct_; }
  bool files_registered() const { return files_registered_; }
  bool buffers_registered() const {
    absl::MutexLock lock(&mu_);
    return !regions_.empty();
  }
  UringStats stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  std::string description() const {
    return absl::StrCat("io_uring qd=", depth_, direct_ ? " direct" : " buffered",
                        files_registered_ ? " registered-files" : "",
                        buffers_registered() ? " registered-buffers" : "",
                        options_.io_poll ? " iopoll" : "", options_.sq_poll ? " sqpoll" : "");
  }

 private:
  // Moves pending requests into free ring slots and submits them.
  absl::Status Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool queued = false;
    while (!pending_.empty() && !free_slots_.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;  // SQ full of unsubmitted entries: submit below, retry later
      const unsigned slot = free_slots_.back();
      free_slots_.pop_back();
      slots_[slot] = std::move(pending_.front());
      pending_.pop_front();
      Prepare(sqe, slots_[slot], slot);
      ++in_ring_;
      ++stats_.submitted;
      queued = true;
    }
    if (!queued && io_uring_sq_ready(&ring_) == 0) return absl::OkStatus();
    const int rc = io_uring_submit(&ring_);
    // -EAGAIN/-EBUSY: the kernel is short of resources or the CQ is full; the SQEs stay queued
    // and the next Submit()/Reap() submits them.
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) {
      return ErrnoToStatus(rc, "io_uring_submit");
    }
    return absl::OkStatus();
  }

  void Prepare(io_uring_sqe* sqe, const PendingOp& op, unsigned slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const IoRequest& r = op.request;
    char* buf = static_cast<char*>(r.buffer) + op.done;
    const unsigned len = static_cast<unsigned>(r.length - op.done);
    const uint64_t off = r.offset + op.done;
    const int file = files_registered_ ? r.file_index : files_[r.file_index].fd;
    const int buf_index = FixedBufferIndex(buf, len);
    if (buf_index >= 0) {
      ++stats_.fixed_buffer_ops;
      if (r.op == IoOp::kRead) {
        io_uring_prep_read_fixed(sqe, file, buf, len, off, buf_index);
      } else {
        io_uring_prep_write_fixed(sqe, file, buf, len, off, buf_index);
      }
    } else if (r.op == IoOp::kRead) {
      io_uring_prep_read(sqe, file, buf, len, off);
    } else {
      io_uring_prep_write(sqe, file, buf, len, off);
    }
    if (files_registered_) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, slot);
  }

  int FixedBufferIndex(const char* buf, size_t len) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t i = 0; i < regions_.size(); ++i) {
      const char* base = static_cast<const char*>(regions_[i].iov_base);
      if (buf >= base && buf + len <= base + regions_[i].iov_len) return static_cast<int>(i);
    }
    return -1;
  }

  // Processes every CQE available now (entering the kernel only in IOPOLL mode).
  absl::Status DrainCq() ABSL_EXCLUSIVE_LOCKS_REQUIRED(cq_mu_) {
    while (true) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_peek_cqe(&ring_, &cqe);
      if (rc == -EAGAIN || cqe == nullptr) return absl::OkStatus();
      if (rc < 0) return ErrnoToStatus(rc, "io_uring_peek_cqe");
      const unsigned slot = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      absl::MutexLock lock(&mu_);
      OnCompletion(slot, res);
    }
  }

  void OnCompletion(unsigned slot, int res) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    PendingOp op = std::move(slots_[slot]);
    free_slots_.push_back(slot);
    --in_ring_;
    int err = 0;
    const size_t before = op.done;
    switch (internal::OnCqeResult(res, op.request.length, &op.done, &err)) {
      case internal::CqeAction::kComplete:
        ready_.push_back({op.request.tag, op.request.op, absl::OkStatus(), op.done});
        break;
      case internal::CqeAction::kRequeue:
        ++(op.done == before ? stats_.requeued_eagain : stats_.requeued_short);
        pending_.push_front(std::move(op));
        break;
      case internal::CqeAction::kFail:
        ready_.push_back(
            {op.request.tag, op.request.op,
             ErrnoToStatus(
                 err, absl::StrCat(op.request.op == IoOp::kRead ? "read" : "write", " file ",
                                   op.request.file_index, " offset ", op.request.offset + op.done)),
             op.done});
        break;
    }
    // Refill the slot just freed; an error here resurfaces on the next Submit().
    (void)Pump();
  }

  absl::Status WaitForCqe(absl::Duration left) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cq_mu_) {
    __kernel_timespec ts;
    const int64_t ns = std::max<int64_t>(1, absl::ToInt64Nanoseconds(left));
    ts.tv_sec = ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    io_uring_cqe* cqe = nullptr;
    int rc;
    if (ext_arg_) {
      rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    } else {
      // Without EXT_ARG liburing implements the timeout with an SQE of its own.
      absl::MutexLock lock(&mu_);
      rc = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
    }
    if (rc == -ETIME) return absl::DeadlineExceededError("timeout");
    if (rc == -EINTR || rc == -EAGAIN) return absl::OkStatus();
    if (rc < 0) return ErrnoToStatus(rc, "io_uring_wait_cqe_timeout");
    return absl::OkStatus();  // the CQE is consumed by the next DrainCq()
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_ring_ != 0 || !pending_.empty();
  }

  const std::vector<UringFile> files_;
  const UringOptions options_;
  io_uring ring_{};
  bool ring_ready_ = false;
  unsigned depth_ = 0;
  bool ext_arg_ = false;
  bool direct_ = false;
  bool files_registered_ = false;

  absl::Mutex cq_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serializes reapers
  mutable absl::Mutex mu_;                       // submission side and bookkeeping
  std::vector<PendingOp> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<unsigned> free_slots_ ABSL_GUARDED_BY(mu_);
  size_t in_ring_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<PendingOp> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<IoCompletion> ready_ ABSL_GUARDED_BY(mu_);
  std::vector<iovec> regions_ ABSL_GUARDED_BY(mu_);
  UringStats stats_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<UringIoEngine>> UringIoEngine::Create(std::vector<UringFile> files,
                                                                     const UringOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(files), options);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<UringIoEngine>(new UringIoEngine(std::move(impl)));
}

UringIoEngine::UringIoEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
UringIoEngine::~UringIoEngine() = default;

absl::Status UringIoEngine::RegisterBuffers(absl::Span<const iovec> regions) {
  return impl_->RegisterBuffers(regions);
}

absl::Status UringIoEngine::Submit(absl::Span<const IoRequest> requests) {
  for (const IoRequest& r : requests) {
    if (absl::Status s = ValidateRequest(r); !s.ok()) return s;
    if (r.length > (1u << 30)) return absl::InvalidArgumentError("request larger than 1 GiB");
  }
  return impl_->Submit(requests);
}

absl::StatusOr<size_t> UringIoEngine::Reap(absl::Span<IoCompletion> out, absl::Duration timeout) {
  return impl_->Reap(out, timeout);
}

size_t UringIoEngine::outstanding() const { return impl_->outstanding(); }
int UringIoEngine::file_count() const { return static_cast<int>(impl_->files().size()); }
uint64_t UringIoEngine::file_size(int file_index) const { return impl_->files()[file_index].size; }
bool UringIoEngine::direct_io() const { return impl_->direct(); }
std::string UringIoEngine::description() const { return impl_->description(); }
UringStats UringIoEngine::stats() const { return impl_->stats(); }
bool UringIoEngine::files_registered() const { return impl_->files_registered(); }
bool UringIoEngine::buffers_registered() const { return impl_->buffers_registered(); }

}  // namespace memvirt::nvme

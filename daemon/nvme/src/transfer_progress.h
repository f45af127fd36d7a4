// What to do with one io_uring completion result of a partially done transfer.
// Internal to the io_uring engine; a pure function so the requeue rules are unit-tested without
// having to make a kernel return -EAGAIN or a short transfer.
//
// Thread safety: pure.
#ifndef MEMVIRT_NVME_SRC_TRANSFER_PROGRESS_H_
#define MEMVIRT_NVME_SRC_TRANSFER_PROGRESS_H_

#include <cerrno>
#include <cstddef>

namespace memvirt::nvme::internal {

enum class CqeAction {
  kComplete,  // all bytes transferred
  kRequeue,   // submit the remaining [done, length) again
  kFail,      // give up with *err (positive errno)
};

// `res` is cqe->res; `done` the bytes transferred before this result (updated in place).
// Note [requeue]: as liburing's examples/io_uring-cp.c, -EAGAIN (and -EINTR) resubmit the same
// range, a short positive result advances `done` and resubmits the rest. A zero result with bytes
// remaining is end-of-file (reads) or a device that accepts nothing (writes): requeueing would
// loop forever, so it fails with EIO.
inline CqeAction OnCqeResult(int res, size_t length, size_t* done, int* err) {
  if (res == -EAGAIN || res == -EINTR) return CqeAction::kRequeue;
  if (res < 0) {
    *err = -res;
    return CqeAction::kFail;
  }
  if (res == 0) {
    *err = EIO;
    return CqeAction::kFail;
  }
  const size_t remaining = length - *done;
  if (static_cast<size_t>(res) >= remaining) {
    *done = length;
    return CqeAction::kComplete;
  }
  *done += static_cast<size_t>(res);
  return CqeAction::kRequeue;
}

}  // namespace memvirt::nvme::internal

#endif  // MEMVIRT_NVME_SRC_TRANSFER_PROGRESS_H_

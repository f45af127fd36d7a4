// Conversion of liburing/POSIX -errno results to absl::Status.
//
// Thread safety: pure functions, safe from any thread.
//
// Note [one place for errno]: every component of the NVMe tier reports failures as absl::Status.
// The kernel speaks -errno (io_uring CQE results, liburing return values, syscalls); this file is
// the ONLY place where an errno value becomes a status code, so the mapping the daemon relies on
// (ENOSPC -> ResourceExhausted, EIO -> Unavailable, ...) is defined once and tested once.
#ifndef MEMVIRT_NVME_ERRNO_STATUS_H_
#define MEMVIRT_NVME_ERRNO_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace memvirt::nvme {

// Maps a positive errno value (or a negative one, as liburing returns it) to a status whose
// message is "<context>: <strerror> (errno N)". errno 0 maps to OkStatus().
//   ENOSPC, EDQUOT, ENOMEM           -> ResourceExhausted
//   EIO, ENXIO, ENODEV, ETIMEDOUT    -> Unavailable (the device failed the request)
//   EACCES, EPERM, EROFS             -> PermissionDenied
//   ENOENT                           -> NotFound
//   EEXIST                           -> AlreadyExists
//   EINVAL, EBADF, EFAULT, EOVERFLOW -> InvalidArgument
//   ENOSYS, EOPNOTSUPP               -> Unimplemented
//   EAGAIN, EINTR, EBUSY             -> Unavailable (callers normally retry before reporting)
//   ECANCELED                        -> Cancelled
//   anything else                    -> Internal
absl::Status ErrnoToStatus(int err, absl::string_view context);

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_ERRNO_STATUS_H_

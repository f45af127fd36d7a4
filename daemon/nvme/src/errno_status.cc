#include "memvirt/nvme/errno_status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace memvirt::nvme {
namespace {

absl::StatusCode CodeForErrno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
      return absl::StatusCode::kResourceExhausted;
    case EIO:
    case ENXIO:
    case ENODEV:
    case ETIMEDOUT:
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return absl::StatusCode::kUnavailable;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EINVAL:
    case EBADF:
    case EFAULT:
    case EOVERFLOW:
      return absl::StatusCode::kInvalidArgument;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    case ECANCELED:
      return absl::StatusCode::kCancelled;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status ErrnoToStatus(int err, absl::string_view context) {
  if (err < 0) err = -err;
  if (err == 0) return absl::OkStatus();
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return absl::Status(CodeForErrno(err), absl::StrCat(context, ": ", text, " (errno ", err, ")"));
}

}  // namespace memvirt::nvme

// Opening a real O_DIRECT file and an io_uring engine in tests, skipping cleanly when the kernel
// (io_uring_queue_init: ENOSYS, EPERM in containers) or the file system (O_DIRECT: EINVAL)
// does not allow it.
#ifndef MEMVIRT_NVME_SRC_URING_TEST_UTIL_H_
#define MEMVIRT_NVME_SRC_URING_TEST_UTIL_H_

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "memvirt/nvme/uring_io_engine.h"

namespace memvirt::nvme::testing {

// Creates `path` of `size` bytes opened with O_DIRECT; -1 if the file system refuses O_DIRECT.
inline int OpenDirectFile(const std::string& path, uint64_t size) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the status means "this machine cannot run io_uring", not a bug.
inline bool IsUringUnsupported(const absl::Status& s) {
  return absl::IsUnimplemented(s) || absl::IsPermissionDenied(s);
}

}  // namespace memvirt::nvme::testing

#define MEMVIRT_SKIP_IF_NO_URING(statusor)                                                     \
  do {                                                                                         \
    if (!(statusor).ok() && ::memvirt::nvme::testing::IsUringUnsupported((statusor).status())) \
      GTEST_SKIP() << "io_uring unavailable: " << (statusor).status();                         \
  } while (0)

#endif  // MEMVIRT_NVME_SRC_URING_TEST_UTIL_H_

#include "memvirt/nvme/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "memvirt/nvme/errno_status.h"
#include "memvirt/nvme/extent_allocator.h"

namespace memvirt::nvme {
namespace {

// Opens (creating if needed) one swap file; sets *reused when it existed.
absl::StatusOr<int> OpenOwnedFile(const std::string& path, int extra_flags, bool* reused) {
  const int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | extra_flags;
  int fd = open(path.c_str(), flags | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    *reused = false;
    if (fchmod(fd, 0600) != 0) {
      absl::Status s = ErrnoToStatus(errno, absl::StrCat("fchmod ", path));
      close(fd);
      return s;
    }
    return fd;
  }
  if (errno != EEXIST) return ErrnoToStatus(errno, absl::StrCat("create ", path));
  fd = open(path.c_str(), flags);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open ", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    absl::Status s = ErrnoToStatus(errno, absl::StrCat("fstat ", path));
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists but is not a private regular file of uid ", geteuid(),
                     " (mode ", st.st_mode & 07777, ", uid ", st.st_uid, "); refusing to reuse"));
  }
  *reused = true;
  return fd;
}

// True when O_DIRECT reads work on fd (some file systems accept the flag at open and fail I/O).
bool DirectReadWorks(int fd) {
  void* buf = nullptr;
  if (posix_memalign(&buf, kDirectIoAlignment, kDirectIoAlignment) != 0) return false;
  const ssize_t n = pread(fd, buf, kDirectIoAlignment, 0);
  const int err = errno;
  free(buf);
  return n >= 0 || err != EINVAL;
}

}  // namespace

std::string SwapFileSet::FileName(int index) {
  return absl::StrCat("memvirt-swap-", index, ".img");
}

absl::StatusOr<std::unique_ptr<SwapFileSet>> SwapFileSet::Open(const SwapFileOptions& options) {
  if (options.file_count < 1) return absl::InvalidArgumentError("file_count must be >= 1");
  const uint64_t per_file = options.total_bytes / options.file_count / kExtentBytes * kExtentBytes;
  if (per_file == 0) {
    return absl::InvalidArgumentError(absl::StrCat("swap size ", options.total_bytes, " over ",
                                                   options.file_count,
                                                   " files leaves less than 2 MiB per file"));
  }
  if (mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return ErrnoToStatus(errno, absl::StrCat("mkdir ", options.dir));
  }
  std::unique_ptr<SwapFileSet> set(new SwapFileSet());
  for (int i = 0; i < options.file_count; ++i) {
    SwapFileInfo info;
    info.path = absl::StrCat(options.dir, "/", FileName(i));
    info.size = per_file;
    bool direct = true;
    absl::StatusOr<int> fd = OpenOwnedFile(info.path, O_DIRECT, &info.reused);
    if (!fd.ok() && absl::IsInvalidArgument(fd.status())) {
      direct = false;
      fd = OpenOwnedFile(info.path, 0, &info.reused);
    }
    if (!fd.ok()) return fd.status();
    info.fd = *fd;
    set->files_.push_back(info);  // closed by ~SwapFileSet on any later failure

    if (fallocate(info.fd, 0, 0, static_cast<off_t>(per_file)) != 0) {
      if (errno != EOPNOTSUPP) {
        absl::Status s = ErrnoToStatus(errno, absl::StrCat("fallocate ", info.path));
        if (!info.reused) unlink(info.path.c_str());
        return s;
      }
      set->preallocated_ = false;
    }
    // A reused file may be larger than requested; either way the size becomes exact.
    if (ftruncate(info.fd, static_cast<off_t>(per_file)) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("ftruncate ", info.path));
    }
    if (direct && !DirectReadWorks(info.fd)) {
      direct = false;
      close(info.fd);
      bool reused = true;
      fd = OpenOwnedFile(info.path, 0, &reused);
      if (!fd.ok()) {
        set->files_.back().fd = -1;
        return fd.status();
      }
      set->files_.back().fd = *fd;
    }
    if (!direct) {
      if (!options.allow_buffered) {
        return absl::InvalidArgumentError(absl::StrCat("O_DIRECT is not supported for ", info.path,
                                                       " and buffered swap I/O was not allowed"));
      }
      set->direct_io_ = false;
    }
  }
  if (!set->direct_io_) {
    // Mixed modes would make alignment rules differ per file: drop O_DIRECT everywhere.
    for (SwapFileInfo& f : set->files_) {
      const int flags = fcntl(f.fd, F_GETFL);
      if (flags >= 0 && (flags & O_DIRECT)) fcntl(f.fd, F_SETFL, flags & ~O_DIRECT);
    }
  }
  return set;
}

SwapFileSet::~SwapFileSet() {
  for (const SwapFileInfo& f : files_) {
    if (f.fd >= 0) close(f.fd);
  }
}

std::vector<UringFile> SwapFileSet::uring_files() const {
  std::vector<UringFile> out;
  for (const SwapFileInfo& f : files_) out.push_back({f.fd, f.size});
  return out;
}

std::vector<uint64_t> SwapFileSet::file_sizes() const {
  std::vector<uint64_t> out;
  for (const SwapFileInfo& f : files_) out.push_back(f.size);
  return out;
}

uint64_t SwapFileSet::total_bytes() const {
  uint64_t total = 0;
  for (const SwapFileInfo& f : files_) total += f.size;
  return total;
}

}  // namespace memvirt::nvme

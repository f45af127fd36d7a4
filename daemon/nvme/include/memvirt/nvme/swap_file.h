// SwapFileSet: the daemon's swap files under --swap-dir, sized by --swap-size.
//
// Files are named memvirt-swap-<i>.img. Each is
//   - created with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600 (then fchmod 0600, whatever the umask);
//   - preallocated with fallocate(2); file systems without it (EOPNOTSUPP) get ftruncate(2)
//     and a sparse file, reported by preallocated() == false;
//   - opened with O_DIRECT; if the file system refuses it (EINVAL at open or on a probe read, as
//     on tmpfs and some overlay set-ups) the set falls back to buffered I/O only when
//     allow_buffered is set, and reports the mode by direct_io().
//
// Note [reuse after restart]: an existing file of that name is reused only if it is a regular
// file owned by the daemon's effective uid with no group/other permission bits; anything else
// fails with FailedPrecondition rather than letting other users read swapped memory. Its old
// contents are garbage to the new daemon: the SwapStore index lives in memory, so a restart
// starts with every extent free and unwritten (see docs/nvme.md, "What a restart keeps").
//
// Ownership: the set owns the file descriptors and closes them on destruction; it never deletes
// the files. Thread safety: immutable after Open(); safe to share.
#ifndef MEMVIRT_NVME_SWAP_FILE_H_
#define MEMVIRT_NVME_SWAP_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "memvirt/nvme/uring_io_engine.h"

namespace memvirt::nvme {

struct SwapFileOptions {
  std::string dir;           // created (mode 0700) if missing; its parent must exist
  uint64_t total_bytes = 0;  // split evenly; each file rounded down to a multiple of 2 MiB
  int file_count = 1;
  bool allow_buffered = false;
};

struct SwapFileInfo {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  bool reused = false;  // the file existed before Open()
};

class SwapFileSet {
 public:
  // InvalidArgument if a file would be smaller than one extent, or O_DIRECT is unsupported and
  // allow_buffered is false; ResourceExhausted if the file system cannot hold total_bytes.
  static absl::StatusOr<std::unique_ptr<SwapFileSet>> Open(const SwapFileOptions& options);
  ~SwapFileSet();
  SwapFileSet(const SwapFileSet&) = delete;
  SwapFileSet& operator=(const SwapFileSet&) = delete;

  const std::vector<SwapFileInfo>& files() const { return files_; }
  std::vector<UringFile> uring_files() const;
  std::vector<uint64_t> file_sizes() const;
  uint64_t total_bytes() const;
  bool direct_io() const { return direct_io_; }
  bool preallocated() const { return preallocated_; }

  static std::string FileName(int index);

 private:
  SwapFileSet() = default;
  std::vector<SwapFileInfo> files_;
  bool direct_io_ = true;
  bool preallocated_ = true;
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_SWAP_FILE_H_

// UringIoEngine: the io_uring (liburing) implementation of IoEngine.
//
// Files are passed in as open file descriptors (not owned; they MUST outlive the engine), e.g.
// those of a SwapFileSet. They are registered with the ring (IOSQE_FIXED_FILE) when the kernel
// allows it. Buffers the caller will use repeatedly (the daemon's host slab arena, a benchmark's
// buffers) may be registered with RegisterBuffers(); requests whose buffer lies inside a
// registered region are issued as READ_FIXED/WRITE_FIXED, all others as plain READ/WRITE.
// At most queue_depth requests are in the ring at once; more wait in a software queue.
//
// Thread safety: internally locked. Submitters share one mutex (the submission side); reapers
// are serialized by a second one and wait for completions without holding the first, so
// submitting never waits behind a blocked Reap() (kernels without IORING_FEAT_EXT_ARG excepted:
// there a timed wait needs the submission queue, and Reap() holds both).
//
// Note [polled modes]: io_poll (IORING_SETUP_IOPOLL) busy-polls the device for completions and
// needs O_DIRECT files on a driver with poll queues (NVMe with poll_queues > 0); sq_poll
// (IORING_SETUP_SQPOLL) has a kernel thread consume submissions. Both are off by default: they
// burn CPU, and IOPOLL fails each request with EOPNOTSUPP on devices without poll queues.
#ifndef MEMVIRT_NVME_URING_IO_ENGINE_H_
#define MEMVIRT_NVME_URING_IO_ENGINE_H_

#include <sys/uio.h>

#include <memory>
#include <vector>

#include "memvirt/nvme/io_engine.h"

namespace memvirt::nvme {

struct UringOptions {
  unsigned queue_depth = 16;
  bool register_files = true;
  bool io_poll = false;
  bool sq_poll = false;
};

struct UringFile {
  int fd = -1;
  uint64_t size = 0;
};

struct UringStats {
  uint64_t submitted = 0;  // SQEs handed to the kernel, requeues included
  uint64_t requeued_eagain = 0;
  uint64_t requeued_short = 0;
  uint64_t fixed_buffer_ops = 0;
};

class UringIoEngine final : public IoEngine {
 public:
  // Fails with Unimplemented / PermissionDenied when the kernel or the container forbids
  // io_uring (io_uring_queue_init returning -ENOSYS / -EPERM): callers (and tests) check for it.
  // direct_io() is true when every file descriptor has O_DIRECT set.
  static absl::StatusOr<std::unique_ptr<UringIoEngine>> Create(std::vector<UringFile> files,
                                                               const UringOptions& options);
  // Waits for all outstanding requests (their buffers must stay valid) and closes the ring.
  ~UringIoEngine() override;

  // Registers `regions` as fixed buffers, replacing earlier ones. REQUIRES: outstanding() == 0.
  // On failure (e.g. RLIMIT_MEMLOCK) nothing is registered and plain requests are used.
  absl::Status RegisterBuffers(absl::Span<const iovec> regions);

  absl::Status Submit(absl::Span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) override;
  size_t outstanding() const override;
  int file_count() const override;
  uint64_t file_size(int file_index) const override;
  bool direct_io() const override;
  std::string description() const override;

  UringStats stats() const;
  bool files_registered() const;
  bool buffers_registered() const;

 private:
  class Impl;
  explicit UringIoEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_URING_IO_ENGINE_H_

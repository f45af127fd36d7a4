// IoEngine: the seam between the NVMe tier and the kernel's block I/O.
//
// An engine owns a table of files (indexed 0..file_count()-1, set up by the concrete engine's
// factory) and executes asynchronous reads and writes against them. Implementations:
//   UringIoEngine        io_uring (liburing), O_DIRECT files, registered buffers and files.
//   MemoryIoEngine       files are byte vectors in memory; for tests.
//   ForwardingIoEngine   forwards every call to another engine (base of wrappers).
//   FaultInjectingIoEngine  ENOSPC after N bytes, EIO on reads of a range, short writes, latency.
//
// Thread safety: every engine is internally synchronized. Submit() may be called from any number
// of threads; Reap() may be called from any thread too, but a completion is delivered to exactly
// one Reap() caller, so the usual shape is one completion thread (see SwapStore). The
// synchronous helpers ReadSync()/WriteSync() reap on the calling thread and therefore
// REQUIRE that no other thread reaps and no other request is outstanding.
//
// Alignment: when an engine reports direct_io() == true (O_DIRECT), buffers, offsets and lengths
// MUST be multiples of kDirectIoAlignment (4096); misaligned requests fail with InvalidArgument.
#ifndef MEMVIRT_NVME_IO_ENGINE_H_
#define MEMVIRT_NVME_IO_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace memvirt::nvme {

inline constexpr size_t kDirectIoAlignment = 4096;

enum class IoOp : uint8_t { kRead, kWrite };

// One transfer. The engine does not own `buffer`: it MUST stay valid (and, for writes,
// unchanged) until the request's completion has been reaped.
struct IoRequest {
  IoOp op = IoOp::kRead;
  int file_index = 0;   // index into the engine's file table
  uint64_t offset = 0;  // byte offset in the file
  void* buffer = nullptr;
  size_t length = 0;
  uint64_t tag = 0;  // opaque to the engine, returned in the completion
};

// The outcome of one request. status.ok() means all `length` bytes were transferred: engines
// requeue -EAGAIN and short transfers themselves (Note [requeue] in src/transfer_progress.h), so a
// caller never sees a partial success. On failure `bytes` says how much was transferred before
// the error (a write may have been torn).
struct IoCompletion {
  uint64_t tag = 0;
  IoOp op = IoOp::kRead;
  absl::Status status;
  size_t bytes = 0;
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // Queues the requests. Returns an error (and queues none of them) if a request is invalid
  // (bad file index, misaligned for direct I/O, zero length, beyond the file's size); once OK,
  // every request completes through Reap(), and failures of the device or the kernel arrive as
  // completion statuses (or, if the engine itself breaks, as Reap()'s error). There is no
  // capacity limit: requests beyond the queue depth wait in a software queue.
  virtual absl::Status Submit(absl::Span<const IoRequest> requests) = 0;

  // Moves up to out.size() completions into `out` and returns how many. Blocks until at least
  // one completion is available or `timeout` elapses (returns 0 then); timeout zero never blocks.
  virtual absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) = 0;

  // Requests submitted and not yet reaped.
  virtual size_t outstanding() const = 0;
  virtual int file_count() const = 0;
  virtual uint64_t file_size(int file_index) const = 0;
  // True when files were opened with O_DIRECT (alignment rules above apply).
  virtual bool direct_io() const = 0;
  // A short description of the mode in use, e.g. "io_uring qd=16 direct registered-files".
  virtual std::string description() const = 0;

  // Non-blocking reap.
  absl::StatusOr<size_t> TryReap(absl::Span<IoCompletion> out) {
    return Reap(out, absl::ZeroDuration());
  }

  // Synchronous convenience: submit one request and wait for it.
  // REQUIRES: nothing else is outstanding and no other thread reaps this engine.
  absl::Status ReadSync(int file_index, uint64_t offset, void* buffer, size_t length);
  absl::Status WriteSync(int file_index, uint64_t offset, const void* buffer, size_t length);

 protected:
  IoEngine() = default;

  // Validates one request against the file table and the alignment rule; shared by engines.
  absl::Status ValidateRequest(const IoRequest& request) const;

 private:
  absl::Status ExecuteSync(const IoRequest& request);
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_IO_ENGINE_H_

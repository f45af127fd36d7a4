// SwapStore: tenant-scoped storage of host slabs on the swap files, over an IoEngine.
//
// A slab is a buffer whose size is a multiple of 2 MiB (kExtentBytes). Put stores a copy and
// returns a SlabId; Get reads it back into a caller buffer; Discard releases it. Every slab
// belongs to the tenant (client id) that put it: another tenant's Get/Discard fails with
// PermissionDenied, and the extent allocator refuses to read extents the caller has not
// written (Note [written state] in extent_allocator.h), so one tenant never reads another's data.
//
// Asynchrony: StartPut/StartGet submit and return at once; the callback runs later on the
// store's completion thread with the final status. This is what lets the daemon prefetch: it
// starts Gets ahead of use and marks the slab resident in the callback. Put/Get are synchronous
// conveniences over them.
//
// Errors (the daemon maps them to its own behaviour):
//   ResourceExhausted  no swap space (returned by StartPut before any I/O) or ENOSPC from the
//                      file system: the slab stays in the host tier.
//   Unavailable        the device failed the request (EIO): for a Get, the client gets an error.
//   DataLoss           CRC32C mismatch on read (verify_crc), or a torn write.
//   PermissionDenied   the slab belongs to another tenant.
//   NotFound           unknown or discarded SlabId.
//   FailedPrecondition the slab's Put has not completed yet.
//   InvalidArgument    size not a multiple of 2 MiB, buffer misaligned for O_DIRECT (4096).
// A failed Put frees its extents; the caller's buffer is only ever read, so the host copy is
// never lost. A failed Get leaves the slab stored (the caller may retry or Discard it); the
// contents of the destination buffer are unspecified then.
//
// Buffer lifetime: a Put's source and a Get's destination MUST stay valid until the callback
// has run, and a Put's source MUST NOT change until then.
//
// Note [completion thread]: the store owns the engine's reaping side (one thread, blocking in
// IoEngine::Reap with a short timeout), because a slab is several I/Os and a Get is finished
// only after its CRCs are checked; callers therefore never reap, and a synchronous Get cannot
// steal an asynchronous prefetch's completion. Requests are submitted while the store's lock is
// held, so an operation is always registered before any of its completions can be processed.
//
// Thread safety: all methods are thread-safe. Callbacks run on the completion thread, never
// inside a call of the caller; they may call StartPut/StartGet/Discard, but MUST NOT call the
// synchronous Put/Get (that would wait for the thread running the callback).
#ifndef MEMVIRT_NVME_SWAP_STORE_H_
#define MEMVIRT_NVME_SWAP_STORE_H_

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "memvirt/nvme/extent_allocator.h"
#include "memvirt/nvme/io_engine.h"

namespace memvirt::nvme {

using SlabId = uint64_t;
using SwapCallback = absl::AnyInvocable<void(absl::Status) &&>;

struct SwapStoreOptions {
  bool verify_crc = true;                // CRC32C per extent, checked on every Get
  uint64_t max_io_bytes = kExtentBytes;  // slabs are split into I/Os of at most this size
  absl::Duration reap_timeout = absl::Milliseconds(20);  // completion thread's wait slice
};

struct SwapStoreStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;  // extents allocated, including those of Puts in flight
  uint64_t slabs = 0;
  uint64_t puts_ok = 0, puts_failed = 0;
  uint64_t gets_ok = 0, gets_failed = 0;
  uint64_t crc_mismatches = 0;
  uint64_t bytes_written = 0, bytes_read = 0;
  ExtentStats extents;
};

class SwapStore {
 public:
  // Uses every file of `engine` (not owned; MUST outlive the store) as swap space.
  static absl::StatusOr<std::unique_ptr<SwapStore>> Create(IoEngine* engine,
                                                           const SwapStoreOptions& options);
  // Waits for all operations in flight (their callbacks run), then stops the completion thread.
  ~SwapStore();
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  // Starts storing `data` for `tenant`. On an immediate error nothing was submitted and `done` is
  // not called. Otherwise `done` receives the outcome; until then the SlabId can only be
  // Discarded (Get fails with FailedPrecondition); after a failure the id is gone.
  absl::StatusOr<SlabId> StartPut(TenantId tenant, absl::Span<const uint8_t> data,
                                  SwapCallback done);
  // Starts reading slab `id` into `dst` (dst.size() MUST equal the slab's size).
  absl::Status StartGet(TenantId tenant, SlabId id, absl::Span<uint8_t> dst, SwapCallback done);

  absl::StatusOr<SlabId> Put(TenantId tenant, absl::Span<const uint8_t> data);
  absl::Status Get(TenantId tenant, SlabId id, absl::Span<uint8_t> dst);

  // Releases a slab. If I/O on it is in flight its extents are freed when that I/O completes;
  // the id is invalid immediately.
  absl::Status Discard(TenantId tenant, SlabId id);
  // Discards every slab of `tenant` (a client that died); returns the bytes released.
  uint64_t DiscardAllOf(TenantId tenant);

  absl::StatusOr<uint64_t> SlabBytes(TenantId tenant, SlabId id) const;
  // Where a slab lives, for diagnostics and tests.
  absl::StatusOr<std::vector<ExtentRun>> SlabExtents(TenantId tenant, SlabId id) const;
  // Bytes of swap the tenant's live slabs hold (what `memctl status` shows as NVMe bytes).
  uint64_t TenantBytes(TenantId tenant) const;
  SwapStoreStats stats() const;
  bool direct_io() const { return engine_->direct_io(); }

 private:
  struct Slab;
  struct Op;
  struct Finished;

  SwapStore(IoEngine* engine, const SwapStoreOptions& options);
  void CompletionLoop();
  // Handles one I/O completion; appends an op that has no I/O left to `finished`.
  void OnIoComplete(const IoCompletion& c, std::vector<Finished>* finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishOp(Finished& f);
  // Frees the slab's extents and forgets it. REQUIRES: no I/O on it in flight.
  void DropSlab(SlabId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Slab*> FindOwned(TenantId tenant, SlabId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<IoRequest> MakeRequests(const std::vector<ExtentRun>& runs, IoOp op, void* buffer,
                                      uint64_t tag) const;

  IoEngine* const engine_;
  const SwapStoreOptions options_;

  mutable absl::Mutex mu_;
  ExtentAllocator allocator_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<SlabId, std::unique_ptr<Slab>> slabs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TenantId, absl::flat_hash_set<SlabId>> by_tenant_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<TenantId, uint64_t> tenant_bytes_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::unique_ptr<Op>> ops_ ABSL_GUARDED_BY(mu_);
  uint64_t next_slab_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_op_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  SwapStoreStats counters_ ABSL_GUARDED_BY(mu_);
  std::thread completion_thread_;
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_SWAP_STORE_H_

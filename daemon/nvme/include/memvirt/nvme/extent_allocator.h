// ExtentAllocator: hands out 2 MiB extents of swap space spread over N swap files, with
// per-tenant ownership.
//
// Policy: first fit. A request for k extents takes the lowest-addressed free run (file order,
// then offset) that holds k; if no single run does but enough extents are free in total, the
// largest runs are combined. Freed extents are coalesced with free neighbours.
//
// Note [written state]: every extent records whether its current owner has written it. Allocation
// clears the flag and CheckReadable() refuses (FailedPrecondition) reads of extents that are not
// written, so bytes a previous owner left on disk are never returned to a new owner: a tenant
// can read an extent only after overwriting it. Nothing is zeroed on free (that would cost a
// write of 2 MiB per extent).
//
// Tenants are client ids; 0 is reserved (kNoTenant) and never owns anything.
// Thread safety: NOT thread-safe; the owner (SwapStore) serializes calls.
#ifndef MEMVIRT_NVME_EXTENT_ALLOCATOR_H_
#define MEMVIRT_NVME_EXTENT_ALLOCATOR_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace memvirt::nvme {

using TenantId = uint64_t;
inline constexpr TenantId kNoTenant = 0;
inline constexpr uint64_t kExtentBytes = uint64_t{2} << 20;

// Extents [first, first + count) of one file.
struct ExtentRun {
  int file_index = 0;
  uint64_t first = 0;
  uint64_t count = 0;

  uint64_t offset() const { return first * kExtentBytes; }
  uint64_t bytes() const { return count * kExtentBytes; }
  friend bool operator==(const ExtentRun&, const ExtentRun&) = default;
};

struct ExtentStats {
  uint64_t total_extents = 0;
  uint64_t used_extents = 0;
  uint64_t free_extents = 0;
  uint64_t free_runs = 0;         // maximal runs of free extents (after coalescing)
  uint64_t largest_free_run = 0;  // in extents
  // 1 - largest_free_run / free_extents: 0 when all free space is one run (or none is free).
  double fragmentation = 0.0;
};

class ExtentAllocator {
 public:
  // extents_per_file[i]: capacity of file i in extents.
  explicit ExtentAllocator(std::vector<uint64_t> extents_per_file);

  // Allocates `count` extents for `tenant`; the runs are in the order the caller should use them.
  // ResourceExhausted if fewer than `count` extents are free; InvalidArgument for count 0 or
  // kNoTenant.
  absl::StatusOr<std::vector<ExtentRun>> Allocate(TenantId tenant, uint64_t count);

  // Frees a run owned by `tenant` (PermissionDenied if any extent of it is not; nothing is freed
  // then). InvalidArgument if the run is out of range.
  absl::Status Free(TenantId tenant, const ExtentRun& run);

  // Frees every extent of `tenant` (a dead client); returns how many.
  uint64_t FreeAllOf(TenantId tenant);

  // Records that `tenant` has written the run. PermissionDenied unless it owns all of it.
  absl::Status MarkWritten(TenantId tenant, const ExtentRun& run);

  // OK iff `tenant` owns every extent of the run and has written it (Note [written state]):
  // PermissionDenied if another tenant owns (or nobody owns) an extent, FailedPrecondition if an
  // owned extent was not written yet.
  absl::Status CheckReadable(TenantId tenant, const ExtentRun& run) const;

  // kNoTenant for a free extent.
  TenantId OwnerOf(int file_index, uint64_t extent) const;
  uint64_t ExtentsOf(TenantId tenant) const;
  ExtentStats stats() const;
  int file_count() const { return static_cast<int>(files_.size()); }

 private:
  struct Extent {
    TenantId owner = kNoTenant;
    bool written = false;
  };
  struct File {
    std::vector<Extent> extents;
    std::map<uint64_t, uint64_t> free_runs;  // first extent -> count, disjoint, coalesced
  };

  absl::Status CheckRange(const ExtentRun& run) const;
  void TakeFromRun(int file_index, uint64_t first, uint64_t count, TenantId tenant);
  void ReleaseRange(int file_index, uint64_t first, uint64_t count);

  std::vector<File> files_;
  uint64_t total_extents_ = 0;
  uint64_t free_extents_ = 0;
  absl::flat_hash_map<TenantId, uint64_t> owned_;  // tenant -> extents owned
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_EXTENT_ALLOCATOR_H_

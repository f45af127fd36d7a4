#include "memvirt/nvme/extent_allocator.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace memvirt::nvme {

ExtentAllocator::ExtentAllocator(std::vector<uint64_t> extents_per_file) {
  files_.resize(extents_per_file.size());
  for (size_t i = 0; i < extents_per_file.size(); ++i) {
    files_[i].extents.resize(extents_per_file[i]);
    if (extents_per_file[i] > 0) files_[i].free_runs.emplace(0, extents_per_file[i]);
    total_extents_ += extents_per_file[i];
  }
  free_extents_ = total_extents_;
}

absl::Status ExtentAllocator::CheckRange(const ExtentRun& run) const {
  if (run.file_index < 0 || run.file_index >= file_count() || run.count == 0 ||
      run.first >= files_[run.file_index].extents.size() ||
      run.count > files_[run.file_index].extents.size() - run.first) {
    return absl::InvalidArgumentError(absl::StrCat("extent run file ", run.file_index, " [",
                                                   run.first, ", +", run.count, ") out of range"));
  }
  return absl::OkStatus();
}

void ExtentAllocator::TakeFromRun(int file_index, uint64_t first, uint64_t count, TenantId tenant) {
  File& f = files_[file_index];
  auto it = f.free_runs.find(first);
  const uint64_t run_count = it->second;
  f.free_runs.erase(it);
  if (run_count > count) f.free_runs.emplace(first + count, run_count - count);
  for (uint64_t e = first; e < first + count; ++e) f.extents[e] = {tenant, false};
  free_extents_ -= count;
  owned_[tenant] += count;
}

absl::StatusOr<std::vector<ExtentRun>> ExtentAllocator::Allocate(TenantId tenant, uint64_t count) {
  if (tenant == kNoTenant) return absl::InvalidArgumentError("tenant 0 is reserved");
  if (count == 0) return absl::InvalidArgumentError("zero extents requested");
  if (count > free_extents_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "swap space exhausted: ", count, " extents requested, ", free_extents_, " free"));
  }
  // First fit: the lowest-addressed run that holds everything.
  for (int fi = 0; fi < file_count(); ++fi) {
    for (const auto& [first, run_count] : files_[fi].free_runs) {
      if (run_count >= count) {
        const uint64_t start = first;
        TakeFromRun(fi, start, count, tenant);
        return std::vector<ExtentRun>{{fi, start, count}};
      }
    }
  }
  // Fragmented: combine the largest runs (fewest I/Os), then order them by address.
  std::vector<std::tuple<uint64_t, int, uint64_t>> runs;  // count, file, first
  for (int fi = 0; fi < file_count(); ++fi) {
    for (const auto& [first, run_count] : files_[fi].free_runs) {
      runs.emplace_back(run_count, fi, first);
    }
  }
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    return std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  });
  std::vector<ExtentRun> out;
  uint64_t left = count;
  for (const auto& [run_count, fi, first] : runs) {
    if (left == 0) break;
    const uint64_t take = std::min(left, run_count);
    out.push_back({fi, first, take});
    left -= take;
  }
  std::sort(out.begin(), out.end(), [](const ExtentRun& a, const ExtentRun& b) {
    return std::tie(a.file_index, a.first) < std::tie(b.file_index, b.first);
  });
  for (const ExtentRun& r : out) TakeFromRun(r.file_index, r.first, r.count, tenant);
  return out;
}

void ExtentAllocator::ReleaseRange(int file_index, uint64_t first, uint64_t count) {
  File& f = files_[file_index];
  for (uint64_t e = first; e < first + count; ++e) f.extents[e] = {};
  free_extents_ += count;
  uint64_t start = first;
  uint64_t len = count;
  auto next = f.free_runs.lower_bound(first);
  if (next != f.free_runs.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      f.free_runs.erase(prev);
    }
  }
  if (next != f.free_runs.end() && next->first == first + count) {
    len += next->second;
    f.free_runs.erase(next);
  }
  f.free_runs.emplace(start, len);
}

absl::Status ExtentAllocator::Free(TenantId tenant, const ExtentRun& run) {
  if (absl::Status s = CheckRange(run); !s.ok()) return s;
  const File& f = files_[run.file_index];
  for (uint64_t e = run.first; e < run.first + run.count; ++e) {
    if (tenant == kNoTenant || f.extents[e].owner != tenant) {
      return absl::PermissionDeniedError(absl::StrCat("extent ", e, " of file ", run.file_index,
                                                      " is not owned by tenant ", tenant));
    }
  }
  ReleaseRange(run.file_index, run.first, run.count);
  if ((owned_[tenant] -= run.count) == 0) owned_.erase(tenant);
  return absl::OkStatus();
}

uint64_t ExtentAllocator::FreeAllOf(TenantId tenant) {
  auto it = owned_.find(tenant);
  if (tenant == kNoTenant || it == owned_.end()) return 0;
  const uint64_t freed = it->second;
  owned_.erase(it);
  for (int fi = 0; fi < file_count(); ++fi) {
    const auto& extents = files_[fi].extents;
    uint64_t e = 0;
    while (e < extents.size()) {
      if (extents[e].owner != tenant) {
        ++e;
        continue;
      }
      uint64_t end = e;
      while (end < extents.size() && extents[end].owner == tenant) ++end;
      ReleaseRange(fi, e, end - e);
      e = end;
    }
  }
  return freed;
}

absl::Status ExtentAllocator::MarkWritten(TenantId tenant, const ExtentRun& run) {
  if (absl::Status s = CheckRange(run); !s.ok()) return s;
  File& f = files_[run.file_index];
  for (uint64_t e = run.first; e < run.first + run.count; ++e) {
    if (tenant == kNoTenant || f.extents[e].owner != tenant) {
      return absl::PermissionDeniedError(absl::StrCat("extent ", e, " of file ", run.file_index,
                                                      " is not owned by tenant ", tenant));
    }
  }
  for (uint64_t e = run.first; e < run.first + run.count; ++e) f.extents[e].written = true;
  return absl::OkStatus();
}

absl::Status ExtentAllocator::CheckReadable(TenantId tenant, const ExtentRun& run) const {
  if (absl::Status s = CheckRange(run); !s.ok()) return s;
  const File& f = files_[run.file_index];
  for (uint64_t e = run.first; e < run.first + run.count; ++e) {
    if (tenant == kNoTenant || f.extents[e].owner != tenant) {
      return absl::PermissionDeniedError(absl::StrCat("extent ", e, " of file ", run.file_index,
                                                      " is not owned by tenant ", tenant));
    }
    if (!f.extents[e].written) {
      return absl::FailedPreconditionError(absl::StrCat("extent ", e, " of file ", run.file_index,
                                                        " has not been written by its owner"));
    }
  }
  return absl::OkStatus();
}

TenantId ExtentAllocator::OwnerOf(int file_index, uint64_t extent) const {
  return files_[file_index].extents[extent].owner;
}

uint64_t ExtentAllocator::ExtentsOf(TenantId tenant) const {
  auto it = owned_.find(tenant);
  return it == owned_.end() ? 0 : it->second;
}

ExtentStats ExtentAllocator::stats() const {
  ExtentStats s;
  s.total_extents = total_extents_;
  s.free_extents = free_extents_;
  s.used_extents = total_extents_ - free_extents_;
  for (const File& f : files_) {
    s.free_runs += f.free_runs.size();
    for (const auto& [first, count] : f.free_runs) {
      s.largest_free_run = std::max(s.largest_free_run, count);
    }
  }
  if (s.free_extents > 0) {
    s.fragmentation = 1.0 - static_cast<double>(s.largest_free_run) / s.free_extents;
  }
  return s;
}

}  // namespace memvirt::nvme

#include "memvirt/nvme/swap_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "memvirt/nvme/crc32c.h"

namespace memvirt::nvme {

struct SwapStore::Slab {
  TenantId tenant = kNoTenant;
  uint64_t bytes = 0;
  std::vector<ExtentRun> runs;
  std::vector<uint32_t> crcs;  // one per extent, in slab order; empty without verify_crc
  bool writing = true;         // the Put is in flight
  int readers = 0;             // Gets in flight
  bool discarded = false;      // invisible to callers; extents freed when I/O drains
};

struct SwapStore::Op {
  IoOp kind = IoOp::kRead;
  SlabId slab = 0;
  SwapCallback done;
  uint8_t* buffer = nullptr;  // Get destination
  uint64_t bytes = 0;
  size_t ios_left = 0;
  absl::Status status;
  std::vector<uint32_t> crcs;  // Get: expected CRCs
};

struct SwapStore::Finished {
  std::unique_ptr<Op> op;
};

namespace {

std::vector<uint32_t> ExtentCrcs(absl::Span<const uint8_t> data) {
  std::vector<uint32_t> crcs;
  crcs.reserve(data.size() / kExtentBytes);
  for (uint64_t off = 0; off < data.size(); off += kExtentBytes) {
    crcs.push_back(Crc32c(data.data() + off, kExtentBytes));
  }
  return crcs;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SwapStore>> SwapStore::Create(IoEngine* engine,
                                                             const SwapStoreOptions& options) {
  if (engine == nullptr || engine->file_count() == 0) {
    return absl::InvalidArgumentError("SwapStore needs an engine with at least one file");
  }
  if (options.max_io_bytes == 0 || options.max_io_bytes % kExtentBytes != 0) {
    return absl::InvalidArgumentError("max_io_bytes must be a positive multiple of 2 MiB");
  }
  return std::unique_ptr<SwapStore>(new SwapStore(engine, options));
}

namespace {
std::vector<uint64_t> ExtentsPerFile(const IoEngine& engine) {
  std::vector<uint64_t> out;
  for (int i = 0; i < engine.file_count(); ++i) out.push_back(engine.file_size(i) / kExtentBytes);
  return out;
}
}  // namespace

SwapStore::SwapStore(IoEngine* engine, const SwapStoreOptions& options)
    : engine_(engine), options_(options), allocator_(ExtentsPerFile(*engine)) {
  completion_thread_ = std::thread([this] { CompletionLoop(); });
}

SwapStore::~SwapStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  completion_thread_.join();
}

std::vector<IoRequest> SwapStore::MakeRequests(const std::vector<ExtentRun>& runs, IoOp op,
                                               void* buffer, uint64_t tag) const {
  std::vector<IoRequest> requests;
  uint8_t* cursor = static_cast<uint8_t*>(buffer);
  for (const ExtentRun& run : runs) {
    for (uint64_t done = 0; done < run.bytes(); done += options_.max_io_bytes) {
      const uint64_t len = std::min(options_.max_io_bytes, run.bytes() - done);
      requests.push_back({op, run.file_index, run.offset() + done, cursor, len, tag});
      cursor += len;
    }
  }
  return requests;
}

absl::StatusOr<SlabId> SwapStore::StartPut(TenantId tenant, absl::Span<const uint8_t> data,
                                           SwapCallback done) {
  if (tenant == kNoTenant) return absl::InvalidArgumentError("tenant 0 is reserved");
  if (data.empty() || data.size() % kExtentBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slab size ", data.size(), " is not a positive multiple of 2 MiB"));
  }
  if (engine_->direct_io() && reinterpret_cast<uintptr_t>(data.data()) % kDirectIoAlignment != 0) {
    return absl::InvalidArgumentError("slab buffer is not 4096-byte aligned (O_DIRECT)");
  }
  std::vector<uint32_t> crcs;
  if (options_.verify_crc) crcs = ExtentCrcs(data);

  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<ExtentRun>> runs =
      allocator_.Allocate(tenant, data.size() / kExtentBytes);
  if (!runs.ok()) return runs.status();
  const SlabId id = next_slab_id_++;
  const uint64_t op_id = next_op_id_++;
  std::vector<IoRequest> requests =
      MakeRequests(*runs, IoOp::kWrite, const_cast<uint8_t*>(data.data()), op_id);

  auto slab = std::make_unique<Slab>();
  slab->tenant = tenant;
  slab->bytes = data.size();
  slab->runs = *std::move(runs);
  slab->crcs = std::move(crcs);
  auto op = std::make_unique<Op>();
  op->kind = IoOp::kWrite;
  op->slab = id;
  op->done = std::move(done);
  op->bytes = data.size();
  op->ios_left = requests.size();

  if (absl::Status s = engine_->Submit(requests); !s.ok()) {
    for (const ExtentRun& run : slab->runs) (void)allocator_.Free(tenant, run);
    ++counters_.puts_failed;
    return s;
  }
  slabs_[id] = std::move(slab);
  ops_[op_id] = std::move(op);
  by_tenant_[tenant].insert(id);
  tenant_bytes_[tenant] += data.size();
  return id;
}

absl::StatusOr<SwapStore::Slab*> SwapStore::FindOwned(TenantId tenant, SlabId id) const {
  auto it = slabs_.find(id);
  if (it == slabs_.end() || it->second->discarded) {
    return absl::NotFoundError(absl::StrCat("no swap slab ", id));
  }
  if (it->second->tenant != tenant) {
    return absl::PermissionDeniedError(
        absl::StrCat("swap slab ", id, " does not belong to tenant ", tenant));
  }
  return it->second.get();
}

absl::Status SwapStore::StartGet(TenantId tenant, SlabId id, absl::Span<uint8_t> dst,
                                 SwapCallback done) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slab*> found = FindOwned(tenant, id);
  if (!found.ok()) return found.status();
  Slab* slab = *found;
  if (slab->writing) {
    return absl::FailedPreconditionError(absl::StrCat("swap slab ", id, " is still being written"));
  }
  if (dst.size() != slab->bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("destination of ", dst.size(), " bytes for a slab of ", slab->bytes));
  }
  if (engine_->direct_io() && reinterpret_cast<uintptr_t>(dst.data()) % kDirectIoAlignment != 0) {
    return absl::InvalidArgumentError("destination is not 4096-byte aligned (O_DIRECT)");
  }
  for (const ExtentRun& run : slab->runs) {
    if (absl::Status s = allocator_.CheckReadable(tenant, run); !s.ok()) return s;
  }
  const uint64_t op_id = next_op_id_++;
  std::vector<IoRequest> requests = MakeRequests(slab->runs, IoOp::kRead, dst.data(), op_id);
  auto op = std::make_unique<Op>();
  op->kind = IoOp::kRead;
  op->slab = id;
  op->done = std::move(done);
  op->buffer = dst.data();
  op->bytes = dst.size();
  op->ios_left = requests.size();
  op->crcs = slab->crcs;
  if (absl::Status s = engine_->Submit(requests); !s.ok()) {
    ++counters_.gets_failed;
    return s;
  }
  ++slab->readers;
  ops_[op_id] = std::move(op);
  return absl::OkStatus();
}

absl::StatusOr<SlabId> SwapStore::Put(TenantId tenant, absl::Span<const uint8_t> data) {
  absl::Notification finished;
  absl::Status result;
  absl::StatusOr<SlabId> id = StartPut(tenant, data, [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  });
  if (!id.ok()) return id.status();
  finished.WaitForNotification();
  if (!result.ok()) return result;
  return id;
}

absl::Status SwapStore::Get(TenantId tenant, SlabId id, absl::Span<uint8_t> dst) {
  absl::Notification finished;
  absl::Status result;
  absl::Status started = StartGet(tenant, id, dst, [&](absl::Status s) {
    result = std::move(s);
    finished.Notify();
  });
  if (!started.ok()) return started;
  finished.WaitForNotification();
  return result;
}

void SwapStore::DropSlab(SlabId id) {
  auto it = slabs_.find(id);
  Slab& slab = *it->second;
  for (const ExtentRun& run : slab.runs) (void)allocator_.Free(slab.tenant, run);
  if (!slab.discarded) {
    auto t = by_tenant_.find(slab.tenant);
    t->second.erase(id);
    if (t->second.empty()) by_tenant_.erase(t);
    if ((tenant_bytes_[slab.tenant] -= slab.bytes) == 0) tenant_bytes_.erase(slab.tenant);
  }
  slabs_.erase(it);
}

absl::Status SwapStore::Discard(TenantId tenant, SlabId id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slab*> found = FindOwned(tenant, id);
  if (!found.ok()) return found.status();
  Slab* slab = *found;
  if (!slab->writing && slab->readers == 0) {
    DropSlab(id);
    return absl::OkStatus();
  }
  // I/O in flight: hide the slab now, free its extents when the I/O completes.
  slab->discarded = true;
  auto t = by_tenant_.find(tenant);
  t->second.erase(id);
  if (t->second.empty()) by_tenant_.erase(t);
  if ((tenant_bytes_[tenant] -= slab->bytes) == 0) tenant_bytes_.erase(tenant);
  return absl::OkStatus();
}

uint64_t SwapStore::DiscardAllOf(TenantId tenant) {
  std::vector<SlabId> ids;
  {
    absl::MutexLock lock(&mu_);
    auto it = by_tenant_.find(tenant);
    if (it == by_tenant_.end()) return 0;
    ids.assign(it->second.begin(), it->second.end());
  }
  uint64_t released = 0;
  for (SlabId id : ids) {
    absl::StatusOr<uint64_t> bytes = SlabBytes(tenant, id);
    if (bytes.ok() && Discard(tenant, id).ok()) released += *bytes;
  }
  return released;
}

absl::StatusOr<uint64_t> SwapStore::SlabBytes(TenantId tenant, SlabId id) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slab*> found = FindOwned(tenant, id);
  if (!found.ok()) return found.status();
  return (*found)->bytes;
}

absl::StatusOr<std::vector<ExtentRun>> SwapStore::SlabExtents(TenantId tenant, SlabId id) const {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Slab*> found = FindOwned(tenant, id);
  if (!found.ok()) return found.status();
  return (*found)->runs;
}

uint64_t SwapStore::TenantBytes(TenantId tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = tenant_bytes_.find(tenant);
  return it == tenant_bytes_.end() ? 0 : it->second;
}

SwapStoreStats SwapStore::stats() const {
  absl::MutexLock lock(&mu_);
  SwapStoreStats s = counters_;
  s.extents = allocator_.stats();
  s.capacity_bytes = s.extents.total_extents * kExtentBytes;
  s.used_bytes = s.extents.used_extents * kExtentBytes;
  s.slabs = 0;
  for (const auto& [tenant, ids] : by_tenant_) s.slabs += ids.size();
  return s;
}

void SwapStore::CompletionLoop() {
  std::vector<IoCompletion> batch(64);
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_ && ops_.empty()) return;
    }
    absl::StatusOr<size_t> n = engine_->Reap(absl::MakeSpan(batch), options_.reap_timeout);
    if (!n.ok()) {
      // The engine itself failed (not a request): retry rather than spin.
      absl::SleepFor(absl::Milliseconds(1));
      continue;
    }
    std::vector<Finished> finished;
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = 0; i < *n; ++i) OnIoComplete(batch[i], &finished);
    }
    for (Finished& f : finished) FinishOp(f);
  }
}

void SwapStore::OnIoComplete(const IoCompletion& c, std::vector<Finished>* finished) {
  auto it = ops_.find(c.tag);
  if (it == ops_.end()) return;  // not ours (cannot happen with a dedicated engine)
  Op& op = *it->second;
  if (!c.status.ok() && op.status.ok()) op.status = c.status;
  if (--op.ios_left == 0) {
    finished->push_back({std::move(it->second)});
    ops_.erase(it);
  }
}

void SwapStore::FinishOp(Finished& f) {
  Op& op = *f.op;
  uint64_t mismatches = 0;
  if (op.kind == IoOp::kRead && op.status.ok() && !op.crcs.empty()) {
    // Verified outside the lock: the destination belongs to this Get until its callback runs.
    for (size_t i = 0; i < op.crcs.size(); ++i) {
      const uint32_t actual = Crc32c(op.buffer + i * kExtentBytes, kExtentBytes);
      if (actual != op.crcs[i]) {
        ++mismatches;
        if (op.status.ok()) {
          op.status = absl::DataLossError(absl::StrFormat(
              "CRC32C mismatch in extent %d of swap slab %d: stored 0x%08x, read 0x%08x", i,
              op.slab, op.crcs[i], actual));
        }
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    Slab& slab = *slabs_.at(op.slab);
    if (op.kind == IoOp::kWrite) {
      slab.writing = false;
      if (op.status.ok()) {
        ++counters_.puts_ok;
        counters_.bytes_written += op.bytes;
        for (const ExtentRun& run : slab.runs) (void)allocator_.MarkWritten(slab.tenant, run);
        if (slab.discarded) DropSlab(op.slab);
      } else {
        ++counters_.puts_failed;
        DropSlab(op.slab);
      }
    } else {
      --slab.readers;
      counters_.crc_mismatches += mismatches;
      if (op.status.ok()) {
        ++counters_.gets_ok;
        counters_.bytes_read += op.bytes;
      } else {
        ++counters_.gets_failed;
      }
      if (slab.discarded && slab.readers == 0) DropSlab(op.slab);
    }
  }
  if (op.done) std::move(op.done)(std::move(op.status));
}

}  // namespace memvirt::nvme

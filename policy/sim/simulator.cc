#include "memvirt/policy/simulator.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "memvirt/policy/block_layout.h"
#include "memvirt/policy/policy.h"
#include "memvirt/policy/time_bound.h"
#include "shim_clock.h"

namespace memvirt::policy {

absl::StatusOr<PolicyKind> ParsePolicyKind(std::string_view name) {
  if (name == "lru") return PolicyKind::kLru;
  if (name == "lifetime") return PolicyKind::kLifetime;
  if (name == "belady") return PolicyKind::kBelady;
  if (name == "uvm") return PolicyKind::kUvm;
  return absl::InvalidArgumentError(absl::StrCat("unknown policy '", std::string(name),
                                                 "' (expected lru, lifetime, belady or uvm)"));
}

std::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kLifetime:
      return "lifetime";
    case PolicyKind::kBelady:
      return "belady";
    case PolicyKind::kUvm:
      return "uvm";
  }
  return "?";
}

namespace {

// One copy engine: one transfer at a time at a fixed bandwidth.
//
// Note [engine gaps]
//   A transfer takes the earliest idle interval, at or after the time its
//   source data and destination memory are ready, that is long enough for
//   it. So a transfer waiting for its data (e.g. an SSD read still running)
//   does not hold up transfers issued after it whose data is ready: the
//   engine is fed in order of readiness, as a copy queue per source would.
class Engine {
 public:
  double bytes_per_us = 1;

  // Returns the completion time of a transfer that may start at `earliest`.
  double Run(double earliest, uint64_t bytes) {
    const double duration = static_cast<double>(bytes) / bytes_per_us;
    double t = earliest;
    // First busy interval that ends after t.
    auto it = busy_.upper_bound(t);
    if (it != busy_.begin() && std::prev(it)->second > t) --it;
    while (it != busy_.end() && it->first < t + duration) {
      t = std::max(t, it->second);
      ++it;
    }
    // Insert [t, t + duration), merging with touching neighbours.
    double start = t, end = t + duration;
    if (it != busy_.end() && it->first <= end) {
      end = std::max(end, it->second);
      it = busy_.erase(it);
    }
    if (it != busy_.begin()) {
      auto prev = std::prev(it);
      if (prev->second >= start) {
        start = prev->first;
        end = std::max(end, prev->second);
        busy_.erase(prev);
      }
    }
    busy_.emplace(start, end);
    last_end_ = std::max(last_end_, t + duration);
    return t + duration;
  }
  // Forgets idle time before `t` (no transfer will start before it).
  void Prune(double t) {
    while (!busy_.empty() && busy_.begin()->second < t) busy_.erase(busy_.begin());
  }
  double last_end() const { return last_end_; }

 private:
  std::map<double, double> busy_;  // start -> end, disjoint
  double last_end_ = 0;
};

// Free device memory as fragments stamped with the time they become usable.
class DevicePool {
 public:
  explicit DevicePool(uint64_t capacity) : free_(capacity) {
    if (capacity > 0) frags_.emplace(0.0, capacity);
  }
  uint64_t free_bytes() const { return free_; }
  void Release(double when, uint64_t bytes) {
    frags_.emplace(when, bytes);
    free_ += bytes;
  }
  // Takes the earliest-usable bytes. REQUIRES: bytes <= free_bytes().
  // Returns the time at which all of them are usable.
  double Take(uint64_t bytes) {
    double when = 0;
    free_ -= bytes;
    while (bytes > 0) {
      auto it = frags_.begin();
      when = std::max(when, it->first);
      if (it->second <= bytes) {
        bytes -= it->second;
        frags_.erase(it);
      } else {
        it->second -= bytes;
        bytes = 0;
      }
    }
    return when;
  }

 private:
  uint64_t free_;
  std::multimap<double, uint64_t> frags_;
};

BlockKind KindOf(const std::string& kind) {
  if (kind == "weight") return BlockKind::kWeight;
  if (kind == "activation") return BlockKind::kActivation;
  if (kind == "gradient") return BlockKind::kGradient;
  if (kind == "workspace") return BlockKind::kWorkspace;
  if (kind == "optimizer" || kind == "optimizer_state") return BlockKind::kOptimizerState;
  return BlockKind::kOther;
}

bool Writes(AccessMode m) { return (static_cast<uint8_t>(m) & 2) != 0; }

constexpr uint64_t kNotPinned = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kFar = uint64_t{1} << 62;

class Simulation {
 public:
  Simulation(const trace::Trace& trace, const SimConfig& config)
      : trace_(trace),
        config_(config),
        layout_(LayoutBlocks(trace, config.chunk_bytes, config.small_granularity)),
        pool_(config.device_bytes),
        uvm_(config.policy == PolicyKind::kUvm),
        clock_(config.pcie_gbps * 1e3, config.shim_remap_us) {
    h2d_.bytes_per_us = d2h_.bytes_per_us = config.pcie_gbps * 1e3;
    ssd_read_.bytes_per_us = ssd_write_.bytes_per_us = config.ssd_gbps * 1e3;
    // Note [host staging]: stage no further ahead than the device lookahead.
    stage_horizon_us_ = static_cast<double>(config.device_bytes) / h2d_.bytes_per_us;
  }

  absl::StatusOr<SimResult> Run();

 private:
  enum class Backing : uint8_t { kNone, kHost, kSsd };
  struct Block {
    bool live = false;
    bool has_data = false;
    bool resident = false;
    bool dirty = false;
    bool in_host_set = false;
    Backing backing = Backing::kNone;
    double ready = 0;          // device copy usable from
    double last_use_end = 0;   // end of the last kernel that used it
    double backing_ready = 0;  // backing copy complete at
    uint64_t pinned = kNotPinned;
    uint64_t last_use_step = 0;
    uint64_t host_key = 0;
    bool in_ssd_set = false;
    bool in_dup_set = false;
    // Note [unread write backs]: written back, not read back since; the
    // iteration whose stats count the write back.
    bool unread_write_back = false;
    uint32_t write_back_iteration = 0;
    uint64_t dup_key = 0;
    uint64_t ssd_key = 0;
  };

  absl::Status Prepare();
  void Birth(uint32_t tensor);
  void Death(uint32_t tensor, double when);
  absl::Status EnsureSpace(uint64_t bytes, double now, uint64_t step);
  void Evict(BlockId id, double now);
  double WriteBack(BlockId id, double earliest);
  // The bookkeeping of a write back whose D2H copy ends at `d2h_end`.
  double RecordWriteBack(BlockId id, double earliest, double d2h_end);
  bool MakeHostRoom(BlockId id, uint64_t bytes, double now);
  void DropBacking(BlockId id);
  void UpdateSsdSet(BlockId id);
  void UpdateDupSet(BlockId id);
  void Stage(double now);
  void Fetch(BlockId id, double now, double memory_ready, bool overwrites);
  // The block's written-back data is read back (read) or destroyed unread.
  void SettleWriteBack(BlockId id, bool read);
  void Prefetch(double now, uint64_t step);
  uint64_t HostKey(BlockId id) const;
  void SetHostKey(BlockId id);
  // Note [shim mechanism]
  absl::Status ShimKernel(uint64_t k, uint64_t step);
  absl::Status ShimAcquire(uint64_t bytes, uint64_t step, bool* sustained);
  void ShimPageIn(BlockId id);
  void ShimDeath(uint32_t tensor);
  void AfterKernel(const std::vector<BlockAccess>& acc, uint64_t step, double end);

  const trace::Trace& trace_;
  const SimConfig& config_;
  BlockLayout layout_;
  DevicePool pool_;
  Engine h2d_, d2h_, ssd_read_, ssd_write_;
  std::unique_ptr<Policy> policy_;
  std::vector<Block> blocks_;
  std::vector<std::vector<BlockAccess>> accesses_;  // per kernel index
  std::vector<uint64_t> kernel_device_bytes_;
  std::vector<std::vector<uint32_t>> born_, dies_;  // per kernel index: tensor indices
  std::vector<uint32_t> persistent_;                // persistent tensors that are used
  uint64_t host_used_ = 0;
  std::set<std::pair<uint64_t, BlockId>> host_set_;  // host-backed blocks, demote largest first
  std::set<std::pair<uint64_t, BlockId>> ssd_set_;   // SSD-only blocks, stage smallest first
  std::set<std::pair<uint64_t, BlockId>> dup_set_;   // resident blocks with a host copy
  IterationStats* stats_ = nullptr;
  uint32_t iteration_ = 0;
  uint64_t now_step_ = 0;
  SimResult result_;
  double stage_horizon_us_ = 0;
  // Note [uvm model]
  const bool uvm_;
  // Note [shim mechanism]: the timelines, and device bytes of freed blocks
  // still mapped (reused by new blocks, or reclaimed with an unmap).
  ShimClock clock_;
  uint64_t dead_bytes_ = 0;
  uint64_t shim_step_ = 0;
};

absl::Status Simulation::Prepare() {
  const size_t num_tensors = trace_.tensors.size();
  const size_t num_kernels = trace_.kernels.size();
  std::unordered_map<uint64_t, uint32_t> tensor_index;
  for (size_t i = 0; i < num_tensors; ++i) tensor_index[trace_.tensors[i].id] = i;
  std::unordered_map<uint64_t, size_t> kernel_index;
  for (size_t k = 0; k < num_kernels; ++k) kernel_index[trace_.kernels[k].id] = k;

  constexpr int64_t kNone = -1;
  std::vector<int64_t> first_use(num_tensors, kNone), last_use(num_tensors, kNone),
      free_at(num_tensors, kNone);
  accesses_.resize(num_kernels);
  kernel_device_bytes_.resize(num_kernels);
  for (size_t k = 0; k < num_kernels; ++k) {
    const trace::TraceKernel& kernel = trace_.kernels[k];
    std::map<uint32_t, uint8_t> modes;  // tensor index -> read(1)|write(2)
    for (uint64_t id : kernel.reads) modes[tensor_index.at(id)] |= 1;
    for (uint64_t id : kernel.writes) modes[tensor_index.at(id)] |= 2;
    uint64_t bytes = 0;
    for (const auto& [t, m] : modes) {
      if (k < config_.prologue_kernels && !trace_.tensors[t].persistent) {
        return absl::InvalidArgumentError(absl::StrCat("prologue kernel ", kernel.id,
                                                       " touches tensor ", trace_.tensors[t].id,
                                                       ", which is not persistent"));
      }
      if (first_use[t] == kNone) first_use[t] = static_cast<int64_t>(k);
      last_use[t] = static_cast<int64_t>(k);
      for (uint32_t c = 0; c < layout_.count[t]; ++c) {
        const BlockId b = layout_.first[t] + c;
        accesses_[k].push_back(BlockAccess{b, static_cast<AccessMode>(m)});
        bytes += layout_.blocks[b].device_bytes;
      }
    }
    kernel_device_bytes_[k] = bytes;
    result_.max_kernel_bytes = std::max(result_.max_kernel_bytes, bytes);
    if (bytes > config_.device_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "kernel ", kernel.id, " (", kernel.name, ") touches ", bytes,
          " bytes of blocks, more than the device memory (", config_.device_bytes, ")"));
    }
  }
  for (const trace::TraceFree& f : trace_.frees) {
    const uint32_t t = tensor_index.at(f.tensor);
    free_at[t] =
        std::max<int64_t>(free_at[t], static_cast<int64_t>(kernel_index.at(f.after_kernel)));
  }
  born_.resize(num_kernels);
  dies_.resize(num_kernels);
  uint64_t live = 0, live_device = 0;
  std::vector<uint64_t> device_bytes_of(num_tensors, 0);
  for (size_t t = 0; t < num_tensors; ++t) {
    for (uint32_t c = 0; c < layout_.count[t]; ++c)
      device_bytes_of[t] += layout_.blocks[layout_.first[t] + c].device_bytes;
    if (first_use[t] == kNone) continue;
    if (trace_.tensors[t].persistent) {
      persistent_.push_back(static_cast<uint32_t>(t));
      live += trace_.tensors[t].bytes;
      live_device += device_bytes_of[t];
      continue;
    }
    born_[first_use[t]].push_back(static_cast<uint32_t>(t));
    dies_[std::max(last_use[t], free_at[t])].push_back(static_cast<uint32_t>(t));
  }
  for (size_t k = 0; k < num_kernels; ++k) {
    for (uint32_t t : born_[k]) live += trace_.tensors[t].bytes, live_device += device_bytes_of[t];
    result_.peak_live_bytes = std::max(result_.peak_live_bytes, live);
    result_.peak_device_bytes = std::max(result_.peak_device_bytes, live_device);
    for (uint32_t t : dies_[k]) live -= trace_.tensors[t].bytes, live_device -= device_bytes_of[t];
  }
  blocks_.resize(layout_.blocks.size());
  result_.blocks = layout_.blocks.size();
  result_.kernels = num_kernels;
  for (size_t k = config_.prologue_kernels; k < num_kernels; ++k) {
    result_.ideal_us += trace_.kernels[k].us;
  }
  return absl::OkStatus();
}

uint64_t Simulation::HostKey(BlockId id) const {
  // Larger key = demoted to SSD first: the farthest next use, or for a policy
  // without next-use knowledge the least recently used.
  std::optional<uint64_t> d = policy_->NextUseDistance(id);
  if (d.has_value()) return std::min(now_step_ + *d, kFar - 1);
  return kFar + (kFar - 1 - std::min(blocks_[id].last_use_step, kFar - 1));
}

void Simulation::SetHostKey(BlockId id) {
  Block& b = blocks_[id];
  if (!b.in_host_set) return;
  host_set_.erase({b.host_key, id});
  b.host_key = HostKey(id);
  host_set_.insert({b.host_key, id});
  UpdateDupSet(id);
}

void Simulation::UpdateSsdSet(BlockId id) {
  Block& b = blocks_[id];
  const bool want = b.live && !b.resident && b.backing == Backing::kSsd;
  if (b.in_ssd_set && (!want || b.ssd_key != HostKey(id))) {
    ssd_set_.erase({b.ssd_key, id});
    b.in_ssd_set = false;
  }
  if (want && !b.in_ssd_set) {
    b.ssd_key = HostKey(id);
    ssd_set_.insert({b.ssd_key, id});
    b.in_ssd_set = true;
  }
}

// Note [host staging]
//   SSD bandwidth is a fifth of the link's, so blocks parked on SSD must
//   start their way back long before a device prefetch could take them (the
//   device has no room that early). When the policy knows next uses, the SSD
//   read engine promotes the soonest-needed SSD blocks into free host memory,
//   soonest first; from there a prefetch moves them at link speed. This is
//   the job of the node daemon's NVMe tier in the product.
void Simulation::Stage(double now) {
  while (!ssd_set_.empty()) {
    auto first = ssd_set_.begin();
    if (first->first >= kFar) return;  // the policy does not know next uses
    const BlockId id = first->second;
    Block& b = blocks_[id];
    const uint64_t data = layout_.blocks[id].data_bytes;
    if (ssd_read_.last_end() > now + stage_horizon_us_) return;
    if (!MakeHostRoom(id, data, now)) return;
    ssd_set_.erase(first);
    b.in_ssd_set = false;
    b.backing_ready = ssd_read_.Run(std::max(now, b.backing_ready), data);
    stats_->ssd_read_bytes += data;
    ++stats_->staged;
    b.backing = Backing::kHost;
    host_used_ += data;
    b.in_host_set = true;
    b.host_key = HostKey(id);
    host_set_.insert({b.host_key, id});
  }
}

void Simulation::UpdateDupSet(BlockId id) {
  Block& b = blocks_[id];
  const bool want = b.resident && b.backing == Backing::kHost;
  if (b.in_dup_set && (!want || b.dup_key != b.host_key)) {
    dup_set_.erase({b.dup_key, id});
    b.in_dup_set = false;
  }
  if (want && !b.in_dup_set) {
    b.dup_key = b.host_key;
    dup_set_.insert({b.dup_key, id});
    b.in_dup_set = true;
  }
}

void Simulation::DropBacking(BlockId id) {
  Block& b = blocks_[id];
  if (b.in_dup_set) {
    dup_set_.erase({b.dup_key, id});
    b.in_dup_set = false;
  }
  if (b.backing == Backing::kHost) {
    host_used_ -= layout_.blocks[id].data_bytes;
    if (b.in_host_set) host_set_.erase({b.host_key, id});
    b.in_host_set = false;
  }
  b.backing = Backing::kNone;
  UpdateSsdSet(id);
}

// Note [host duplicates]
//   A block fetched from the host tier keeps its host copy, so that evicting
//   it again unmodified costs nothing. When the host tier is full those
//   duplicates are dropped first (soonest next use first: the least likely to
//   be evicted again); only then are host blocks demoted to SSD.
bool Simulation::MakeHostRoom(BlockId id, uint64_t bytes, double now) {
  if (host_used_ + bytes <= config_.host_bytes) return true;
  while (host_used_ + bytes > config_.host_bytes && !dup_set_.empty()) {
    const BlockId d = dup_set_.begin()->second;
    DropBacking(d);
  }
  if (host_used_ + bytes <= config_.host_bytes) return true;
  const uint64_t key = HostKey(id);
  while (host_used_ + bytes > config_.host_bytes) {
    if (host_set_.empty()) return false;
    auto last = std::prev(host_set_.end());
    if (last->first <= key) return false;  // everything on the host is needed sooner
    const BlockId h = last->second;
    Block& hb = blocks_[h];
    const uint64_t data = layout_.blocks[h].data_bytes;
    hb.backing_ready = ssd_write_.Run(std::max(now, hb.backing_ready), data);
    stats_->ssd_write_bytes += data;
    host_set_.erase(last);
    hb.in_host_set = false;
    hb.backing = Backing::kSsd;
    UpdateSsdSet(h);
    host_used_ -= data;
  }
  return true;
}

// Note [unread write backs]
//   A write back is waste when the data is overwritten, freed or dropped as
//   dead before it is read back: IterationStats::write_back_unread_bytes
//   counts those (against the iteration of the write back), and
//   write_back_carried_bytes those still unread when the simulation ends
//   (read in a later iteration, or never).
void Simulation::SettleWriteBack(BlockId id, bool read) {
  Block& b = blocks_[id];
  if (!b.unread_write_back) return;
  b.unread_write_back = false;
  if (!read) {
    result_.per_iteration[b.write_back_iteration].write_back_unread_bytes +=
        layout_.blocks[id].data_bytes;
  }
}

double Simulation::WriteBack(BlockId id, double earliest) {
  return RecordWriteBack(id, earliest, d2h_.Run(earliest, layout_.blocks[id].data_bytes));
}

double Simulation::RecordWriteBack(BlockId id, double earliest, double d2h_end) {
  Block& b = blocks_[id];
  const uint64_t data = layout_.blocks[id].data_bytes;
  b.unread_write_back = true;
  b.write_back_iteration = iteration_;
  const bool to_host = MakeHostRoom(id, data, earliest);
  stats_->d2h_bytes += data;
  if (to_host) {
    b.backing = Backing::kHost;
    b.backing_ready = d2h_end;
    host_used_ += data;
    b.in_host_set = true;
    b.host_key = HostKey(id);
    host_set_.insert({b.host_key, id});
  } else {
    b.backing = Backing::kSsd;
    b.backing_ready = ssd_write_.Run(d2h_end, data);
    UpdateSsdSet(id);
    stats_->ssd_write_bytes += data;
  }
  return d2h_end;
}

void Simulation::Evict(BlockId id, double now) {
  Block& b = blocks_[id];
  const double earliest = std::max({now, b.last_use_end, b.ready});
  double usable = earliest;
  const bool dead = policy_->IsDead(id);
  if (b.has_data && dead) {
    if (b.dirty) ++stats_->dead_drops;
    SettleWriteBack(id, /*read=*/false);
    DropBacking(id);
    b.has_data = false;
  } else if (b.has_data && (b.dirty || b.backing == Backing::kNone)) {
    usable = WriteBack(id, earliest);
  }
  b.resident = false;
  b.dirty = false;
  UpdateSsdSet(id);
  UpdateDupSet(id);
  policy_->OnEvicted(id);
  pool_.Release(usable, layout_.blocks[id].device_bytes);
  ++stats_->evictions;
}

absl::Status Simulation::EnsureSpace(uint64_t bytes, double now, uint64_t step) {
  while (pool_.free_bytes() < bytes) {
    std::optional<BlockId> v = policy_->PickVictim(
        [&](BlockId b) { return blocks_[b].resident && blocks_[b].pinned != step; });
    if (!v.has_value() || !blocks_[*v].resident || blocks_[*v].pinned == step) {
      return absl::InternalError(
          absl::StrCat("policy ", std::string(policy_->name()), " found no victim at step ", step));
    }
    Evict(*v, now);
  }
  return absl::OkStatus();
}

void Simulation::Fetch(BlockId id, double now, double memory_ready, bool overwrites) {
  Block& b = blocks_[id];
  const uint64_t data = layout_.blocks[id].data_bytes;
  double ready = std::max(now, memory_ready);
  if (b.has_data) SettleWriteBack(id, /*read=*/!overwrites);
  if (b.has_data && !overwrites) {
    if (b.backing == Backing::kHost) {
      ready = h2d_.Run(std::max(ready, b.backing_ready), data);
    } else {
      const double staged = ssd_read_.Run(std::max(now, b.backing_ready), data);
      stats_->ssd_read_bytes += data;
      ready = h2d_.Run(std::max(staged, memory_ready), data);
    }
    stats_->h2d_bytes += data;
  }
  // Note [uvm model]: migration, not duplication: the host copy goes.
  if (uvm_) DropBacking(id);
  b.resident = true;
  b.dirty = false;
  UpdateSsdSet(id);
  UpdateDupSet(id);
  b.ready = ready;
  policy_->OnResident(id);
}

void Simulation::Prefetch(double now, uint64_t step) {
  auto evictable = [&](BlockId b) { return blocks_[b].resident && blocks_[b].pinned != step; };
  for (BlockId v : policy_->EvictAheadCandidates(evictable, pool_.free_bytes())) {
    if (!evictable(v)) continue;
    Evict(v, now);
    ++stats_->evict_ahead;
  }
  std::vector<PrefetchRequest> wanted = policy_->PrefetchCandidates(config_.device_bytes);
  for (const PrefetchRequest& r : wanted) {
    Block& b = blocks_[r.block];
    if (!b.live || b.resident) continue;
    const uint64_t need = layout_.blocks[r.block].device_bytes;
    while (pool_.free_bytes() < need) {
      std::optional<BlockId> v = policy_->PickVictimForPrefetch(evictable, r.block);
      if (!v.has_value() || !evictable(*v)) return;
      Evict(*v, now);
    }
    const double memory_ready = pool_.Take(need);
    Fetch(r.block, now, memory_ready, /*overwrites=*/false);
    ++stats_->prefetches;
  }
}

void Simulation::Birth(uint32_t tensor) {
  const trace::TraceTensor& t = trace_.tensors[tensor];
  for (uint32_t c = 0; c < layout_.count[tensor]; ++c) {
    const BlockId id = layout_.first[tensor] + c;
    if (uvm_ && blocks_[id].live) {
      // Note [uvm model]: born again; what is not on the device is a fresh
      // allocation, with no data to fetch, unless it migrates back (Note
      // [G10 iterations]).
      if (!blocks_[id].resident && !config_.uvm_migrate_reborn) {
        SettleWriteBack(id, /*read=*/false);
        DropBacking(id);
        blocks_[id].has_data = false;
      }
      continue;
    }
    blocks_[id] = Block{};
    blocks_[id].live = true;
    policy_->OnAlloc(id, BlockInfo{layout_.blocks[id].device_bytes, KindOf(t.kind), t.persistent});
  }
}

void Simulation::Death(uint32_t tensor, double when) {
  if (uvm_) return;  // Note [uvm model]: the memory stays mapped
  for (uint32_t c = 0; c < layout_.count[tensor]; ++c) {
    const BlockId id = layout_.first[tensor] + c;
    Block& b = blocks_[id];
    if (b.resident) pool_.Release(std::max(when, b.ready), layout_.blocks[id].device_bytes);
    SettleWriteBack(id, /*read=*/false);
    DropBacking(id);
    policy_->OnFree(id);
    b = Block{};
  }
}

void Simulation::AfterKernel(const std::vector<BlockAccess>& acc, uint64_t step, double end) {
  for (const BlockAccess& a : acc) {
    Block& b = blocks_[a.block];
    b.last_use_end = end;
    b.last_use_step = step;
    if (Writes(a.mode)) {
      b.has_data = true;
      b.dirty = true;
      DropBacking(a.block);
    } else {
      SetHostKey(a.block);
    }
  }
}

// Note [shim mechanism]
//   With SimConfig::shim_mechanism a kernel is timed as the shim
//   (shim/core/shim_core.cc) runs it, on a ShimClock (host, compute stream,
//   one copy stream), instead of on four overlapping copy engines:
//   - Before the launch, every missing block is paged in, in access order
//     (Note [residency before launch] in shim_core.h): device room first
//     from free memory, then by reclaiming a freed block's chunks (an
//     unmap), then by evicting a batch of victims (below). A block with
//     data is filled from the host tier: its host mapping is unmapped (at
//     once: cuMemUnmap does not wait for queued device work, Note [unmap is
//     immediate] in sim/src/api_vmm.cc, and the evicted chunk's uses ended
//     before its eviction), the device chunk mapped and the copy enqueued on
//     the copy stream; a block without data is only
//     mapped. A new block takes the chunks of a freed one first without any
//     call (the shim's allocator reuses a freed range, still mapped).
//   - Eviction (Note [eviction], Note [eviction batches]): up to
//     clamp(budget chunks / 16, 1, 8) victims per miss (16 when the miss
//     evicts again), the policy's first choices among resident blocks the
//     launch does not touch; the host waits for the last uses (and fills)
//     of those still in use. Every victim with
//     data is written back (the shim keeps no clean host copy: a page-in
//     releases the host slot), the copies are enqueued together behind the
//     copy stream's page-ins and the host waits for them, then each chunk is
//     unmapped (no drain: its uses have ended) and its host slot mapped.
//     The look-ahead page-out of budgets of 512 chunks and more is not
//     modelled.
//   - Prefetch: after the demand page-ins, while device memory is free, the
//     policy's candidates are paged in the same way, only into free memory
//     (no eviction).
//   - The kernel waits for its fills: all fills of the launch when it
//     needed one (one event covers them), else the pending fills of the
//     blocks it touches. The host does not wait for the launch.
//   - Freed blocks stay mapped until a new block or a reclaim takes them.
//   - The policy sees what the shim tells it: accesses and residency, no
//     kernel durations and no iteration marks (the lifetime policy learns
//     the period by detection, with its default options). The application
//     synchronizes at the end of each iteration (memvirt-replay does).
//   Page-outs and page-ins thus never overlap each other. A page-in
//   overlaps the kernels queued before its launch unless an eviction had
//   to wait for one of them (a victim still in use) or the copy stream is
//   busy with that eviction's page-outs; the launch waits for its fills.
//   Only the host tier is timed: the shim's spill tier (SSD) is not
//   modelled, so host memory should hold the footprint.
absl::Status Simulation::ShimKernel(uint64_t k, uint64_t step) {
  now_step_ = step;
  for (uint32_t t : born_[k]) Birth(t);
  const std::vector<BlockAccess>& acc = accesses_[k];
  policy_->OnAccess(step, acc);
  for (const BlockAccess& a : acc) blocks_[a.block].pinned = step;
  bool filled = false;
  for (const BlockAccess& a : acc) {
    Block& b = blocks_[a.block];
    if (b.resident) continue;
    const uint64_t need = layout_.blocks[a.block].device_bytes;
    if (!b.has_data && dead_bytes_ >= need) {
      dead_bytes_ -= need;  // a freed block's chunks, still mapped
    } else {
      bool sustained = false;
      if (absl::Status st = ShimAcquire(need, step, &sustained); !st.ok()) return st;
      pool_.Take(need);
    }
    filled |= b.has_data;
    ShimPageIn(a.block);
    ++stats_->demand_fetches;
  }
  if (UsesLookahead(config_) && pool_.free_bytes() > 0) {
    for (const PrefetchRequest& r : policy_->PrefetchCandidates(pool_.free_bytes())) {
      Block& b = blocks_[r.block];
      if (!b.live || b.resident || !b.has_data) continue;
      const uint64_t need = layout_.blocks[r.block].device_bytes;
      if (pool_.free_bytes() < need) break;
      pool_.Take(need);
      ShimPageIn(r.block);
      ++stats_->prefetches;
    }
  }
  double ready = 0;
  for (const BlockAccess& a : acc) ready = std::max(ready, blocks_[a.block].ready);
  if (filled) ready = std::max(ready, clock_.copy_end());
  const double previous_end = clock_.compute_end();
  const double start = clock_.Launch(ready, trace_.kernels[k].us);
  stats_->stall_us += start - std::max(previous_end, 0.0);
  const double end = clock_.compute_end();
  AfterKernel(acc, step, end);
  for (uint32_t t : dies_[k]) ShimDeath(t);
  return absl::OkStatus();
}

absl::Status Simulation::ShimAcquire(uint64_t bytes, uint64_t step, bool* sustained) {
  const uint64_t chunk = std::max<uint64_t>(config_.chunk_bytes, 1);
  while (pool_.free_bytes() < bytes) {
    if (dead_bytes_ > 0) {  // reclaim one freed chunk
      const uint64_t take = std::min(dead_bytes_, chunk);
      dead_bytes_ -= take;
      clock_.Unmap();
      pool_.Release(clock_.host(), take);
      continue;
    }
    const uint64_t budget_chunks = config_.device_bytes / chunk;
    const uint64_t batch = std::clamp<uint64_t>(budget_chunks / 16, 1, *sustained ? 16 : 8);
    *sustained = true;
    std::vector<BlockId> victims;
    auto candidate = [&](BlockId id) {
      const Block& b = blocks_[id];
      return b.resident && b.pinned != step &&
             std::find(victims.begin(), victims.end(), id) == victims.end();
    };
    // Note [shim mechanism]: the policy's first choices, idle or not (Note
    // [eviction] in shim/core/shim_core.h); the host waits for those in use.
    while (victims.size() < batch) {
      std::optional<BlockId> v = policy_->PickVictim(candidate);
      if (!v.has_value() || !candidate(*v)) break;
      victims.push_back(*v);
    }
    if (victims.empty()) {
      return absl::InternalError(
          absl::StrCat("policy ", std::string(policy_->name()), " found no victim at step ", step));
    }
    for (BlockId v : victims) clock_.WaitUntil(std::max(blocks_[v].last_use_end, blocks_[v].ready));
    double copies_end = clock_.host();
    std::vector<double> d2h_end(victims.size(), 0);
    for (size_t i = 0; i < victims.size(); ++i) {
      if (blocks_[victims[i]].has_data) {
        d2h_end[i] = copies_end = clock_.Copy(layout_.blocks[victims[i]].data_bytes);
      }
    }
    clock_.WaitUntil(copies_end);
    for (size_t i = 0; i < victims.size(); ++i) {
      const BlockId id = victims[i];
      Block& b = blocks_[id];
      if (b.has_data) {
        RecordWriteBack(id, clock_.host(), d2h_end[i]);
        b.backing_ready = d2h_end[i];
      }
      clock_.Unmap();
      if (b.has_data) clock_.Map();  // its host slot, at its address
      b.resident = false;
      b.dirty = false;
      UpdateSsdSet(id);
      UpdateDupSet(id);
      policy_->OnEvicted(id);
      pool_.Release(clock_.host(), layout_.blocks[id].device_bytes);
      ++stats_->evictions;
    }
  }
  return absl::OkStatus();
}

void Simulation::ShimPageIn(BlockId id) {
  Block& b = blocks_[id];
  if (b.has_data) {
    clock_.Unmap();  // the host slot's mapping
    clock_.Map();
    const uint64_t data = layout_.blocks[id].data_bytes;
    SettleWriteBack(id, /*read=*/true);
    b.ready = clock_.Copy(data);
    stats_->h2d_bytes += data;
    DropBacking(id);  // the shim releases the host slot once the fill is done
  } else {
    clock_.Map();
    b.ready = clock_.host();
  }
  b.resident = true;
  b.dirty = false;
  UpdateSsdSet(id);
  UpdateDupSet(id);
  policy_->OnResident(id);
}

void Simulation::ShimDeath(uint32_t tensor) {
  for (uint32_t c = 0; c < layout_.count[tensor]; ++c) {
    const BlockId id = layout_.first[tensor] + c;
    Block& b = blocks_[id];
    if (b.resident) dead_bytes_ += layout_.blocks[id].device_bytes;
    SettleWriteBack(id, /*read=*/false);
    DropBacking(id);
    policy_->OnFree(id);
    b = Block{};
  }
}

absl::StatusOr<SimResult> Simulation::Run() {
  if (absl::Status st = Prepare(); !st.ok()) return st;
  const uint64_t num_kernels = trace_.kernels.size();
  const uint64_t iterations = static_cast<uint64_t>(config_.iterations);
  LifetimeOptions options;
  options.h2d_bytes_per_us = config_.pcie_gbps * 1e3;
  if (config_.lookahead_slack >= 0) options.lookahead_slack = config_.lookahead_slack;
  if (config_.plan_fraction >= 0) options.plan_fraction = config_.plan_fraction;
  if (config_.evict_ahead_slack >= 0) options.evict_ahead_slack = config_.evict_ahead_slack;
  options.plan_residency = config_.plan_residency;
  options.prefetch_beside_resident = true;  // every candidate is issued
  switch (config_.policy) {
    case PolicyKind::kLru:
    case PolicyKind::kUvm:
      policy_ = MakeLruPolicy();
      break;
    case PolicyKind::kLifetime:
      // Note [shim mechanism]: the shim's lifetime policy has the defaults.
      policy_ = MakeLifetimePolicy(config_.shim_mechanism ? LifetimeOptions{} : options);
      break;
    case PolicyKind::kBelady: {
      std::vector<StepAccesses> future;
      future.reserve(iterations * num_kernels);
      // Note [Belady horizon]
      //   The oracle's future is the simulated iterations plus one more. Were
      //   the future to end with the reported iteration, every weight would
      //   look dead after its last use there and be dropped instead of written
      //   back: a "lower bound" no real run could reach, since training goes
      //   on.
      for (uint64_t it = 0; it <= iterations; ++it) {
        for (uint64_t k = 0; k < num_kernels; ++k) {
          future.push_back(StepAccesses{it * num_kernels + k, accesses_[k], trace_.kernels[k].us});
        }
      }
      policy_ = MakeBeladyPolicy(std::move(future), options);
      break;
    }
  }
  result_.policy = std::string(PolicyKindName(config_.policy));
  const bool lookahead = UsesLookahead(config_);
  policy_->OnBudgetChange(config_.device_bytes);
  result_.per_iteration.resize(iterations);
  stats_ = &result_.per_iteration[0];

  // Persistent tensors start in the host tier, spilling to SSD; with a
  // prologue they start empty, and the prologue gives them their data (as a
  // program allocates and fills them).
  for (uint32_t t : persistent_) {
    Birth(t);
    for (uint32_t c = 0; config_.prologue_kernels == 0 && c < layout_.count[t]; ++c) {
      const BlockId id = layout_.first[t] + c;
      Block& b = blocks_[id];
      b.has_data = true;
      const uint64_t data = layout_.blocks[id].data_bytes;
      if (host_used_ + data <= config_.host_bytes) {
        b.backing = Backing::kHost;
        host_used_ += data;
        b.in_host_set = true;
        b.host_key = HostKey(id);
        host_set_.insert({b.host_key, id});
      } else {
        b.backing = Backing::kSsd;
        UpdateSsdSet(id);
      }
    }
  }

  double now = 0;
  for (uint64_t it = 0; it < iterations; ++it) {
    stats_ = &result_.per_iteration[it];
    iteration_ = static_cast<uint32_t>(it);
    const double iteration_start = now;
    if (config_.shim_mechanism) {
      const uint64_t prologue = config_.prologue_kernels;
      for (uint64_t k = 0; it == 0 && k < prologue; ++k) {
        if (absl::Status st = ShimKernel(k, shim_step_++); !st.ok()) return st;
      }
      clock_.Drain();
      const double iteration_start = clock_.host();
      for (uint64_t k = prologue; k < num_kernels; ++k) {
        if (absl::Status st = ShimKernel(k, shim_step_++); !st.ok()) return st;
      }
      clock_.Drain();  // the application synchronizes at the end of an iteration
      stats_->time_us = clock_.host() - iteration_start;
      continue;  // no iteration mark: the shim gives none
    }
    for (uint64_t k = 0; k < num_kernels; ++k) {
      const uint64_t step = it * num_kernels + k;
      h2d_.Prune(now);
      d2h_.Prune(now);
      ssd_read_.Prune(now);
      ssd_write_.Prune(now);
      now_step_ = step;
      for (uint32_t t : born_[k]) Birth(t);
      const std::vector<BlockAccess>& acc = accesses_[k];
      policy_->OnAccess(step, acc);
      policy_->OnStepDuration(step, trace_.kernels[k].us);
      for (const BlockAccess& a : acc) blocks_[a.block].pinned = step;
      // Demand: every block of the kernel resident before it starts.
      uint64_t faulted_pages = 0;
      for (const BlockAccess& a : acc) {
        if (blocks_[a.block].resident) continue;
        const uint64_t need = layout_.blocks[a.block].device_bytes;
        if (absl::Status st = EnsureSpace(need, now, step); !st.ok()) return st;
        const double memory_ready = pool_.Take(need);
        Fetch(a.block, now, memory_ready, !uvm_ && a.mode == AccessMode::kWrite);
        ++stats_->demand_fetches;
        const uint64_t page = config_.uvm_page_bytes;
        faulted_pages += (layout_.blocks[a.block].data_bytes + page - 1) / page;
      }
      double start = now;
      for (const BlockAccess& a : acc) start = std::max(start, blocks_[a.block].ready);
      if (uvm_ && faulted_pages > 0) {
        // Note [uvm model]: the fault handler takes the faults in batches.
        const uint64_t batches =
            (faulted_pages + config_.uvm_fault_batch_pages - 1) / config_.uvm_fault_batch_pages;
        start += static_cast<double>(batches) * config_.uvm_fault_latency_us;
        stats_->faults += faulted_pages;
      }
      stats_->stall_us += start - now;
      const double end = start + trace_.kernels[k].us;
      AfterKernel(acc, step, end);
      // Deaths first: their memory, usable at `end`, may take prefetches.
      for (uint32_t t : dies_[k]) Death(t, end);
      if (lookahead) {
        Prefetch(start, step);
        Stage(start);
      }
      now = end;
    }
    stats_->time_us = now - iteration_start;
    policy_->OnIterationMark();
    // Next-use knowledge may have changed wholesale (an iteration was learned).
    std::vector<BlockId> host_blocks;
    host_blocks.reserve(host_set_.size());
    for (const auto& [key, id] : host_set_) host_blocks.push_back(id);
    for (BlockId id : host_blocks) SetHostKey(id);
    std::vector<BlockId> ssd_blocks;
    for (const auto& [key, id] : ssd_set_) ssd_blocks.push_back(id);
    for (BlockId id : ssd_blocks) UpdateSsdSet(id);
  }
  for (BlockId id = 0; id < blocks_.size(); ++id) {
    const Block& b = blocks_[id];
    if (b.unread_write_back) {
      result_.per_iteration[b.write_back_iteration].write_back_carried_bytes +=
          layout_.blocks[id].data_bytes;
    }
  }
  result_.reported = result_.per_iteration.back();
  result_.slowdown = result_.ideal_us > 0 ? result_.reported.time_us / result_.ideal_us : 1.0;
  return std::move(result_);
}

}  // namespace

// Note [uvm model]
//   What G10 calls Base UVM (its simulator, platformxlab/G10, policy lru),
//   on this simulator's blocks: demand paging only, LRU victims, and the
//   CUDA unified-memory semantics G10 models: pages migrate (a fetch frees
//   the host copy, so every eviction is a write back, clean or not); the
//   driver knows neither whole overwrites (a kernel's outputs are migrated
//   in like its inputs) nor dead data (a tensor's memory stays mapped after
//   its last use, until LRU evicts and writes it back; when the tensor is
//   born again, in the next iteration, the part no longer on the device is a
//   fresh allocation, with nothing to fetch); and a kernel's missing pages
//   are page faults, handled in batches of uvm_fault_batch_pages 4 KiB pages
//   (uvm_page_bytes), each batch taking uvm_fault_latency_us before the
//   kernel can run, on top of its transfers (no overlap with compute).
//   First-touch pages fault too (no transfer). Defaults: G10's
//   PCIe_latency_us (5) per batch of 256 faults (the NVIDIA driver's
//   uvm_perf_fault_batch_count). G10 itself times a faulting kernel from
//   profiled page-fault kernel times, which the traces do not carry.
//
// Note [G10 iterations]
//   G10 simulates two iterations and publishes the faster one with its
//   traffic (src/resources/gatherKernelInfo.py: select_idx = 0 if iteration
//   0 took less time, else 1). Its Base UVM never frees a page (no
//   pre-deallocation hints without use_prefetch; LRU evicts every page to
//   the host), and faults in every page a kernel touches from where it
//   lives, outputs included; only a page never touched before is allocated
//   without a transfer. So in its iteration 0 rebirths are fresh
//   allocations, and in its iteration 1 every page off the device migrates
//   in. Every fetch or allocation into a full GPU evicts one page, so fetched
//   = evicted exactly in an iteration without allocations: BERT_Base_256's
//   published 45,385,726 pages each way are iteration 1; ResNet152_1280's
//   (72.7 M pages in, 346.9 M out) are iteration 0. uvm_migrate_reborn
//   selects the iteration-1 semantics; the default is iteration 0's.

// Note [Belady bound]
//   By default the belady policy runs demand-only: victims by farthest next
//   use (dead data first, dropped without write back), no prefetch, no
//   evict-ahead, no host staging. That is MIN with dead-data drop, the
//   traffic lower bound the lifetime policy is held to. Prefetching can only
//   add traffic (a block brought in early holds memory longer); evicting
//   ahead picks victims before the blocks born meanwhile exist.
//   belady_lookahead gives it the lifetime policy's lookahead instead, for
//   a time comparison with perfect knowledge.
bool UsesLookahead(const SimConfig& config) {
  return config.prefetch && (config.policy != PolicyKind::kBelady || config.belady_lookahead);
}

absl::StatusOr<SimResult> Simulate(const trace::Trace& trace, const SimConfig& config) {
  if (config.iterations < 1) return absl::InvalidArgumentError("iterations must be >= 1");
  if (!(config.pcie_gbps > 0) || !(config.ssd_gbps > 0))
    return absl::InvalidArgumentError("bandwidths must be > 0");
  if (config.chunk_bytes == 0 || config.small_granularity == 0)
    return absl::InvalidArgumentError("chunk and granularity must be > 0");
  if (config.device_bytes == 0) return absl::InvalidArgumentError("device memory must be > 0");
  if (config.shim_mechanism && config.policy == PolicyKind::kUvm) {
    return absl::InvalidArgumentError("the shim mechanism pages with lru, lifetime or belady");
  }
  if (config.prologue_kernels > 0 && config.policy == PolicyKind::kBelady) {
    return absl::InvalidArgumentError("belady's future has no prologue");
  }
  if (config.prologue_kernels > 0 &&
      (!config.shim_mechanism || config.prologue_kernels >= trace.kernels.size())) {
    return absl::InvalidArgumentError(
        "a prologue needs the shim mechanism and fewer kernels than the trace");
  }
  if (config.uvm_page_bytes == 0 || config.uvm_fault_batch_pages == 0 ||
      !(config.uvm_fault_latency_us >= 0)) {
    return absl::InvalidArgumentError("uvm page and fault batch must be > 0, latency >= 0");
  }
  Simulation sim(trace, config);
  absl::StatusOr<SimResult> result = sim.Run();
  if (result.ok()) {
    result->time_lower_bound_us = TimeLowerBoundUs(trace, config.device_bytes, config.host_bytes,
                                                   config.pcie_gbps, config.ssd_gbps);
  }
  return result;
}

}  // namespace memvirt::policy

#include "daemon/core/node_state.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/arbiter.h"
#include "daemon/core/mutex_lock.h"
#include "glog/logging.h"

namespace memvirt::daemon {
namespace {

uint64_t SatSub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// Note [reported counters]
// Paging counters are cumulative values a client reports; the node totals (and the metrics'
// *_total counters) add their deltas. A client can send anything, so a delta counts only if it
// is plausible: the counter did not go back (a registration starts at the value it reports)
// and it grew by at most kMaxPagingBytesPerSecond over the time since the previous report
// (plus kPagingSlackBytes). An implausible report moves the client's baseline without adding
// to the totals, which saturate instead of wrapping: a total never goes down.
constexpr double kMaxPagingBytesPerSecond = 1e12;  // far above any host link
constexpr uint64_t kPagingSlackBytes = uint64_t{1} << 32;

uint64_t PlausibleDelta(uint64_t before, uint64_t now, absl::Duration elapsed) {
  if (now < before) return 0;
  const double limit =
      absl::ToDoubleSeconds(std::max(elapsed, absl::ZeroDuration())) * kMaxPagingBytesPerSecond +
      static_cast<double>(kPagingSlackBytes);
  const uint64_t delta = now - before;
  return static_cast<double>(delta) <= limit ? delta : 0;
}

void SaturatingAdd(uint64_t& total, uint64_t delta) {
  total = delta > UINT64_MAX - total ? UINT64_MAX : total + delta;
}

absl::Status ValidateUsage(const GpuUsage& u) {
  for (uint64_t v : {u.resident_bytes, u.host_bytes, u.nvme_bytes}) {
    if (v > kMaxBytes) return absl::InvalidArgumentError("usage byte count out of range");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGpuUuid(const std::string& uuid) {
  if (uuid.empty()) return absl::InvalidArgumentError("gpu_uuid is required");
  if (uuid.size() > kMaxUuidLength) return absl::InvalidArgumentError("gpu_uuid is too long");
  for (unsigned char ch : uuid) {
    if (ch <= ' ' || ch >= 0x7f) {
      return absl::InvalidArgumentError("gpu_uuid must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

NodeState::NodeState(NodeOptions options, const Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      authorizer_(options_.admin_gid),
      started_(clock->Now()) {
  MutexLock lock(&mu_);
  for (const StaticGpu& g : options_.gpus) {
    Gpu& gpu = gpus_[g.gpu_uuid];
    gpu.device_memory_bytes = g.device_memory_bytes;
    gpu.configured = true;
  }
}

absl::Status NodeState::Validate() const {
  absl::flat_hash_set<std::string> seen;
  for (const StaticGpu& g : options_.gpus) {
    if (absl::Status s = ValidateGpuUuid(g.gpu_uuid); !s.ok()) return s;
    if (!seen.insert(g.gpu_uuid).second) {
      return absl::InvalidArgumentError(absl::StrCat("GPU ", g.gpu_uuid, " configured twice"));
    }
    if (g.device_memory_bytes == 0 || g.device_memory_bytes > kMaxBytes) {
      return absl::InvalidArgumentError(absl::StrCat("GPU ", g.gpu_uuid, ": bad memory size"));
    }
  }
  if (options_.shrink_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("shrink deadline must be positive");
  }
  return absl::OkStatus();
}

uint64_t NodeState::CapacityOf(const Gpu& gpu) const {
  if (gpu.draining) return 0;
  return SatSub(gpu.device_memory_bytes, options_.reserve_bytes);
}

absl::Status NodeState::ValidateRegistration(const Registration& reg) const {
  if (reg.gpus.empty()) return absl::InvalidArgumentError("register: at least one GPU required");
  if (reg.gpus.size() > kMaxGpusPerClient) {
    return absl::InvalidArgumentError("register: too many GPUs");
  }
  if (reg.process_name.size() > kMaxProcessNameLength) {
    return absl::InvalidArgumentError("register: process_name too long");
  }
  if (reg.host_demand_bytes > kMaxBytes) {
    return absl::InvalidArgumentError("register: host_demand_bytes out of range");
  }
  absl::flat_hash_set<std::string> seen;
  if (absl::Status s = ValidateClaims(reg.gpus, seen); !s.ok()) return s;
  if (reg.usage.size() > kMaxGpusPerClient) {
    return absl::InvalidArgumentError("register: too many usage entries");
  }
  for (const GpuUsage& u : reg.usage) {
    if (!seen.contains(u.gpu_uuid)) {
      return absl::InvalidArgumentError("register: usage for an unclaimed GPU");
    }
    if (absl::Status s = ValidateUsage(u); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status NodeState::ValidateClaims(const std::vector<GpuClaim>& claims,
                                       absl::flat_hash_set<std::string>& seen) {
  for (const GpuClaim& c : claims) {
    if (absl::Status s = ValidateGpuUuid(c.gpu_uuid); !s.ok()) return s;
    if (!seen.insert(c.gpu_uuid).second) {
      return absl::InvalidArgumentError("register: duplicate gpu_uuid " + c.gpu_uuid);
    }
    if (c.device_memory_bytes == 0 || c.device_memory_bytes > kMaxBytes) {
      return absl::InvalidArgumentError("register: device_memory_bytes out of range");
    }
    if (c.demand_bytes > kMaxBytes || c.min_bytes > c.device_memory_bytes) {
      return absl::InvalidArgumentError("register: demand_bytes/min_bytes out of range");
    }
    if (c.demand_bytes != 0 && c.min_bytes > c.demand_bytes) {
      return absl::InvalidArgumentError("register: min_bytes exceeds demand_bytes");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ClientId> NodeState::Register(const PeerCredentials& peer, const Registration& reg,
                                             DirectiveSink* sink) {
  if (absl::Status s = ValidateRegistration(reg); !s.ok()) return s;
  if (peer.pid <= 0) return absl::InvalidArgumentError("peer pid unknown");
  MutexLock lock(&mu_);
  if (FindByPid(peer.pid) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("pid ", peer.pid, " is already registered"));
  }
  std::vector<GpuClaim> claims = reg.gpus;
  if (absl::Status s = AdmitClaims(peer, claims); !s.ok()) return s;
  auto owned = std::make_unique<Client>();
  Client& c = *owned;
  c.id = next_client_id_++;
  c.creds = peer;
  c.name = reg.process_name;
  c.since = clock_->Now();
  c.host_demand = reg.host_demand_bytes;
  AttachGpus(c, claims);
  for (const GpuUsage& u : reg.usage) {
    ClientGpu& g = c.gpus[u.gpu_uuid];
    g.usage = u;
    g.usage_time = c.since;
    // Note [daemon restart]: what it holds now stays reserved until it acknowledges.
    g.held = std::min(u.resident_bytes, gpus_[u.gpu_uuid].device_memory_bytes);
    g.admitted = g.held > 0;  // Note [admission]: a running process is admitted as it is
  }
  clients_.emplace(c.id, std::move(owned));
  ++totals_.clients_registered;

  for (const GpuClaim& claim : claims) Rebalance(claim.gpu_uuid, c.id);
  RebalanceHost(c.id);

  RegisterResult result;
  result.client_id = c.id;
  result.pid = peer.pid;
  result.host_budget_bytes = c.host_budget;
  result.budgets = AnnounceBudgets(c, claims);
  c.sink = sink;
  sink->OnRegistered(result);
  // A re-registering client that holds more than its new budget is told to shrink.
  for (auto& [uuid, g] : c.gpus) {
    if (g.held > g.granted) SendBudget(c, g, /*shrink=*/true);
  }
  LOG(INFO) << "registered client " << c.id << " pid " << peer.pid << " uid " << peer.uid << " ("
            << reg.gpus.size() << " GPU(s))";
  return c.id;
}

void NodeState::AttachGpus(Client& c, const std::vector<GpuClaim>& claims) {
  for (const GpuClaim& claim : claims) {
    auto [it, inserted] = gpus_.try_emplace(claim.gpu_uuid);
    Gpu& gpu = it->second;
    if (inserted) {
      gpu.device_memory_bytes = claim.device_memory_bytes;
      LOG(INFO) << "learned GPU " << claim.gpu_uuid << " with " << claim.device_memory_bytes
                << " bytes from pid " << c.creds.pid << " uid " << c.creds.uid;
    }
    ClientGpu& g = c.gpus[claim.gpu_uuid];
    g.claim = claim;
    g.admitted = false;  // until it holds memory or is granted a usable budget
    g.usage.gpu_uuid = claim.gpu_uuid;
    g.counted_since = c.since;
    gpu.clients.push_back(c.id);
  }
}

std::vector<GpuBudget> NodeState::AnnounceBudgets(Client& c, const std::vector<GpuClaim>& claims) {
  std::vector<GpuBudget> budgets;
  for (const GpuClaim& claim : claims) {
    ClientGpu& g = c.gpus[claim.gpu_uuid];
    AdmitIfUsable(g);
    budgets.push_back({claim.gpu_uuid, g.admitted ? g.granted : 0, !g.admitted});
  }
  return budgets;
}

absl::Status NodeState::AddGpus(ClientId id, const std::vector<GpuClaim>& gpus) {
  if (gpus.empty()) return absl::InvalidArgumentError("add_gpus: at least one GPU required");
  absl::flat_hash_set<std::string> seen;
  if (absl::Status s = ValidateClaims(gpus, seen); !s.ok()) return s;
  MutexLock lock(&mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return absl::NotFoundError("add_gpus: client not registered");
  Client& c = *it->second;
  if (c.gpus.size() + gpus.size() > kMaxGpusPerClient) {
    return absl::InvalidArgumentError("add_gpus: too many GPUs");
  }
  for (const GpuClaim& claim : gpus) {
    if (c.gpus.count(claim.gpu_uuid) != 0) {
      return absl::InvalidArgumentError("add_gpus: GPU " + claim.gpu_uuid +
                                        " is registered already");
    }
  }
  std::vector<GpuClaim> claims = gpus;
  if (absl::Status s = AdmitClaims(c.creds, claims); !s.ok()) return s;
  AttachGpus(c, claims);
  for (const GpuClaim& claim : claims) Rebalance(claim.gpu_uuid, c.id);
  if (c.sink != nullptr) c.sink->OnGpusAdded(AnnounceBudgets(c, claims));
  LOG(INFO) << "client " << c.id << " pid " << c.creds.pid << " added " << gpus.size()
            << " GPU(s), " << c.gpus.size() << " in all";
  return absl::OkStatus();
}

void NodeState::Unregister(ClientId id) {
  MutexLock lock(&mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  std::unique_ptr<Client> c = std::move(it->second);
  clients_.erase(it);
  ++totals_.clients_reclaimed;
  for (const auto& [uuid, g] : c->gpus) {
    Gpu& gpu = gpus_[uuid];
    gpu.clients.erase(std::remove(gpu.clients.begin(), gpu.clients.end(), id), gpu.clients.end());
  }
  for (const auto& [uuid, g] : c->gpus) {
    Rebalance(uuid, 0);
    ForgetIfUnused(uuid);
  }
  RebalanceHost(0);
  LOG(INFO) << "reclaimed client " << id << " pid " << c->creds.pid;
}

bool NodeState::MayDeclareGpuSize(const PeerCredentials& peer) const {
  if (authorizer_.IsOperator(peer)) return true;
  const std::vector<uid_t>& trusted = options_.gpu_size_trusted_uids;
  return std::find(trusted.begin(), trusted.end(), peer.uid) != trusted.end();
}

absl::Status NodeState::AdmitClaims(const PeerCredentials& peer,
                                    std::vector<GpuClaim>& claims) const {
  size_t learned = 0;
  for (const auto& [uuid, gpu] : gpus_) learned += gpu.configured ? 0 : 1;
  for (GpuClaim& claim : claims) {
    auto it = gpus_.find(claim.gpu_uuid);
    if (it == gpus_.end()) {
      if (!MayDeclareGpuSize(peer)) {
        return absl::FailedPreconditionError(absl::StrCat("GPU ", claim.gpu_uuid,
                                                          " is not configured (--gpu) and uid ",
                                                          peer.uid, " may not declare its size"));
      }
      if (++learned > kMaxLearnedGpus) {
        return absl::ResourceExhaustedError(absl::StrCat("too many GPUs learned from clients (",
                                                         kMaxLearnedGpus,
                                                         "); configure them with --gpu"));
      }
      continue;
    }
    const uint64_t known = it->second.device_memory_bytes;
    if (claim.device_memory_bytes != known) {
      LOG_EVERY_N(WARNING, 64) << "pid " << peer.pid << " uid " << peer.uid << " reports "
                               << claim.device_memory_bytes << " bytes for GPU " << claim.gpu_uuid
                               << "; using the known " << known
                               << " (reported once per 64 occurrences)";
      claim.device_memory_bytes = known;
      claim.min_bytes = std::min(claim.min_bytes, known);
    }
  }
  return absl::OkStatus();
}

void NodeState::ForgetIfUnused(const std::string& uuid) {
  auto it = gpus_.find(uuid);
  if (it == gpus_.end() || it->second.configured || it->second.draining ||
      !it->second.clients.empty()) {
    return;
  }
  gpus_.erase(it);
  VLOG(1) << "forgot learned GPU " << uuid << " (no clients)";
}

uint32_t NodeState::Rebalance(const std::string& uuid, ClientId quiet) {
  Gpu& gpu = gpus_[uuid];
  const uint64_t capacity = CapacityOf(gpu);
  std::vector<ArbiterClaim> claims;
  claims.reserve(gpu.clients.size());
  for (ClientId id : gpu.clients) {
    const ClientGpu& g = clients_.at(id)->gpus.at(uuid);
    claims.push_back(
        {std::min(g.claim.demand_bytes, g.claim.device_memory_bytes), g.claim.min_bytes, g.quota});
    if (claims.back().demand_bytes == 0) claims.back().demand_bytes = g.claim.device_memory_bytes;
  }
  const std::vector<uint64_t> targets = ComputeBudgets(capacity, claims);
  uint32_t notified = 0;
  // Shrinks first: they take effect in the ledger only when acknowledged.
  for (size_t i = 0; i < gpu.clients.size(); ++i) {
    Client& c = *clients_.at(gpu.clients[i]);
    ClientGpu& g = c.gpus.at(uuid);
    g.target = targets[i];
    if (!g.admitted) {  // Note [admission]: its reserve was never announced nor used
      g.granted = std::min(g.granted, g.target);
      g.held = g.granted;
      continue;
    }
    if (g.target < g.granted || (c.id == quiet && g.target < g.held)) {
      g.held = std::max(g.held, g.granted);
      g.granted = g.target;
      if (c.id != quiet) {
        SendBudget(c, g, /*shrink=*/true);
        ++notified;
      }
    }
  }
  // Grows only from memory no one holds.
  const bool in_grace = clock_->Now() < started_ + options_.restart_grace;
  uint64_t held_sum = 0;
  for (ClientId id : gpu.clients) held_sum += clients_.at(id)->gpus.at(uuid).held;
  uint64_t free = SatSub(capacity, held_sum);
  for (ClientId id : gpu.clients) {
    Client& c = *clients_.at(id);
    ClientGpu& g = c.gpus.at(uuid);
    if (g.target <= g.granted) continue;
    // Growing into bytes it already holds costs nothing. Within the restart grace period
    // nobody grows beyond what it holds (Note [daemon restart]).
    uint64_t want = g.target - g.granted;
    if (in_grace) want = std::min(want, SatSub(g.held, g.granted));
    const uint64_t already = SatSub(g.held, g.granted);
    const uint64_t from_free = std::min(SatSub(want, already), free);
    const uint64_t inc = std::min(want, already) + from_free;
    if (inc == 0) continue;
    free -= from_free;
    g.granted += inc;
    g.held = std::max(g.held, g.granted);
    if (g.granted >= g.held) {  // Outstanding shrinks are superseded.
      g.outstanding_shrinks.clear();
      g.first_shrink_deadline = absl::InfiniteFuture();
      g.overdue = false;
    }
    if (c.id != quiet && (g.admitted || AdmitIfUsable(g))) {
      SendBudget(c, g, /*shrink=*/false);
      ++notified;
    }
  }
  return notified;
}

bool NodeState::AdmitIfUsable(ClientGpu& g) {
  if (g.admitted) return false;
  const uint64_t usable = std::max<uint64_t>(1, std::min(g.claim.min_bytes, g.target));
  g.admitted = g.granted >= usable;
  return g.admitted;
}

void NodeState::RebalanceHost(ClientId quiet) {
  if (options_.host_capacity_bytes == 0) return;  // Unlimited: budgets stay 0.
  std::vector<ArbiterClaim> claims;
  std::vector<Client*> order;
  for (auto& [id, c] : clients_) {
    claims.push_back({c->host_demand, 0, 0});
    order.push_back(c.get());
  }
  const std::vector<uint64_t> budgets = ComputeBudgets(options_.host_capacity_bytes, claims);
  for (size_t i = 0; i < order.size(); ++i) {
    Client& c = *order[i];
    if (c.host_budget == budgets[i]) continue;
    c.host_budget = budgets[i];
    if (c.id == quiet) continue;
    Directive d;
    d.kind = Directive::Kind::kHostBudget;
    d.budget_bytes = c.host_budget;
    Send(c, std::move(d));
  }
}

void NodeState::SendBudget(Client& c, ClientGpu& g, bool shrink) {
  Directive d;
  d.kind = Directive::Kind::kBudget;
  d.gpu_uuid = g.claim.gpu_uuid;
  d.budget_bytes = g.granted;
  if (shrink) {
    d.deadline = absl::ToChronoMilliseconds(options_.shrink_deadline);
    const uint64_t id = next_directive_id_;  // Send() assigns this id.
    g.outstanding_shrinks[id] = g.granted;
    g.first_shrink_deadline =
        std::min(g.first_shrink_deadline, clock_->Now() + options_.shrink_deadline);
  }
  Send(c, std::move(d));
}

void NodeState::Send(Client& c, Directive d) {
  d.id = next_directive_id_++;
  c.last_directive_id = d.id;
  ++c.directives_sent;
  ++totals_.directives_sent;
  if (c.sink != nullptr) c.sink->OnDirective(d);
}

void NodeState::UpdateUsage(ClientGpu& g, const GpuUsage& u) {
  const absl::Time now = clock_->Now();
  const absl::Duration elapsed = now - g.counted_since;
  const uint64_t in = PlausibleDelta(g.usage.paged_in_bytes, u.paged_in_bytes, elapsed);
  const uint64_t out = PlausibleDelta(g.usage.paged_out_bytes, u.paged_out_bytes, elapsed);
  const uint64_t nvme_in = PlausibleDelta(g.usage.nvme_read_bytes, u.nvme_read_bytes, elapsed);
  const uint64_t nvme_out = PlausibleDelta(g.usage.nvme_write_bytes, u.nvme_write_bytes, elapsed);
  if ((in == 0 && u.paged_in_bytes != g.usage.paged_in_bytes) ||
      (out == 0 && u.paged_out_bytes != g.usage.paged_out_bytes) ||
      (nvme_in == 0 && u.nvme_read_bytes != g.usage.nvme_read_bytes) ||
      (nvme_out == 0 && u.nvme_write_bytes != g.usage.nvme_write_bytes)) {
    ++totals_.implausible_reports;
    LOG_EVERY_N(WARNING, 100) << "implausible paging counters reported for " << u.gpu_uuid
                              << "; not counted (Note [reported counters], 1 line per 100)";
  }
  SaturatingAdd(totals_.paged_in_bytes, in);
  SaturatingAdd(totals_.paged_out_bytes, out);
  SaturatingAdd(totals_.nvme_read_bytes, nvme_in);
  SaturatingAdd(totals_.nvme_write_bytes, nvme_out);
  if (g.usage_time != absl::InfinitePast() && now > g.usage_time) {
    const double secs = absl::ToDoubleSeconds(now - g.usage_time);
    g.in_rate = static_cast<double>(in) / secs;
    g.out_rate = static_cast<double>(out) / secs;
  }
  g.usage = u;
  g.usage_time = now;
  g.counted_since = now;
}

absl::Status NodeState::ReportHints(ClientId id, const HintBatch& batch) {
  if (batch.allocs.size() > kMaxHintsPerBatch) {
    return absl::InvalidArgumentError("hints: batch too large");
  }
  if (batch.usage.size() > kMaxGpusPerClient) {
    return absl::InvalidArgumentError("hints: too many usage entries");
  }
  MutexLock lock(&mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return absl::NotFoundError("hints: client not registered");
  Client& c = *it->second;
  // Validate everything before changing anything.
  for (const GpuUsage& u : batch.usage) {
    if (!c.gpus.contains(u.gpu_uuid)) {
      return absl::InvalidArgumentError("hints: usage for an unregistered GPU");
    }
    if (absl::Status s = ValidateUsage(u); !s.ok()) return s;
  }
  for (const AllocHint& a : batch.allocs) {
    if (!a.freed && !c.gpus.contains(a.gpu_uuid)) {
      return absl::InvalidArgumentError("hints: allocation on an unregistered GPU");
    }
    if (a.bytes > kMaxBytes) return absl::InvalidArgumentError("hints: allocation size");
  }
  if (batch.iteration < c.iteration) {
    return absl::InvalidArgumentError("hints: iteration went backwards");
  }
  c.iteration = batch.iteration;
  ++c.hint_batches;
  c.alloc_hints += batch.allocs.size();
  for (const AllocHint& a : batch.allocs) {
    if (a.freed) {
      auto found = c.live_allocs.find(a.alloc_id);
      if (found != c.live_allocs.end()) {
        c.live_alloc_bytes -= found->second;
        c.live_allocs.erase(found);
      }
    } else if (c.live_allocs.size() < kMaxLiveAllocationsPerClient) {
      auto [slot, inserted] = c.live_allocs.try_emplace(a.alloc_id, a.bytes);
      if (!inserted) c.live_alloc_bytes -= slot->second;
      slot->second = a.bytes;
      c.live_alloc_bytes += a.bytes;
    }
  }
  for (const GpuUsage& u : batch.usage) UpdateUsage(c.gpus.at(u.gpu_uuid), u);
  CheckHostBudget(c);
  return absl::OkStatus();
}

void NodeState::CheckHostBudget(Client& c) {
  if (c.host_budget == 0 || c.demote_directive_id != 0) return;  // Unlimited, or asked.
  uint64_t host = 0;
  for (const auto& [uuid, g] : c.gpus) host += g.usage.host_bytes;
  if (host <= c.host_budget) return;
  Directive d;
  d.kind = Directive::Kind::kDemote;
  d.bytes = host - c.host_budget;
  d.deadline = absl::ToChronoMilliseconds(options_.shrink_deadline);
  c.demote_directive_id = next_directive_id_;  // Send() assigns this id.
  Send(c, std::move(d));
}

absl::Status NodeState::Acknowledge(ClientId id, const DirectiveAck& ack) {
  if (ack.usage.has_value()) {
    if (absl::Status s = ValidateUsage(*ack.usage); !s.ok()) return s;
  }
  MutexLock lock(&mu_);
  auto it = clients_.find(id);
  if (it == clients_.end()) return absl::NotFoundError("ack: client not registered");
  Client& c = *it->second;
  if (ack.directive_id == 0 || ack.directive_id > c.last_directive_id) {
    return absl::InvalidArgumentError("ack: unknown directive_id");
  }
  if (ack.usage.has_value() && !c.gpus.contains(ack.usage->gpu_uuid)) {
    return absl::InvalidArgumentError("ack: usage for an unregistered GPU");
  }
  ++c.directives_acked;
  if (ack.usage.has_value()) UpdateUsage(c.gpus.at(ack.usage->gpu_uuid), *ack.usage);
  if (ack.directive_id == c.demote_directive_id) {
    c.demote_directive_id = 0;
    return absl::OkStatus();
  }
  if (!ack.complied) return absl::OkStatus();
  for (auto& [uuid, g] : c.gpus) {
    auto found = g.outstanding_shrinks.find(ack.directive_id);
    if (found == g.outstanding_shrinks.end()) continue;
    // Complying with budget b means the client holds at most max(b, granted) now.
    g.held = std::min(g.held, std::max(found->second, g.granted));
    g.outstanding_shrinks.erase(g.outstanding_shrinks.begin(), std::next(found));
    if (g.outstanding_shrinks.empty()) {
      g.held = g.granted;
      g.first_shrink_deadline = absl::InfiniteFuture();
      g.overdue = false;
    }
    Rebalance(uuid, 0);  // Released bytes may let others grow.
    break;
  }
  return absl::OkStatus();
}

void NodeState::Tick() {
  MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  if (!grace_over_ && now >= started_ + options_.restart_grace) {
    grace_over_ = true;
    for (const auto& [uuid, gpu] : gpus_) Rebalance(uuid, 0);
  }
  for (auto& [id, c] : clients_) {
    for (auto& [uuid, g] : c->gpus) {
      if (!g.overdue && now > g.first_shrink_deadline) {
        g.overdue = true;
        ++totals_.shrinks_overdue;
        LOG(WARNING) << "pid " << c->creds.pid << " has not acknowledged its shrink to "
                     << g.granted << " bytes on " << uuid << " in time";
      }
    }
  }
}

NodeState::Client* NodeState::FindByPid(pid_t pid) {
  for (auto& [id, c] : clients_) {
    if (c->creds.pid == pid) return c.get();
  }
  return nullptr;
}

const NodeState::Client* NodeState::FindByPid(pid_t pid) const {
  for (const auto& [id, c] : clients_) {
    if (c->creds.pid == pid) return c.get();
  }
  return nullptr;
}

ClientSnapshot NodeState::SnapshotOf(const Client& c) const {
  ClientSnapshot s;
  s.client_id = c.id;
  s.creds = c.creds;
  s.process_name = c.name;
  s.host_budget_bytes = c.host_budget;
  s.connected_for = clock_->Now() - c.since;
  s.iteration = c.iteration;
  s.hint_batches = c.hint_batches;
  s.alloc_hints = c.alloc_hints;
  s.live_allocations = c.live_allocs.size();
  s.live_allocation_bytes = c.live_alloc_bytes;
  s.directives_sent = c.directives_sent;
  s.directives_acked = c.directives_acked;
  for (const auto& [uuid, g] : c.gpus) {
    ClientGpuSnapshot gs;
    gs.gpu_uuid = uuid;
    gs.budget_bytes = g.admitted ? g.granted : 0;
    gs.target_bytes = g.target;
    gs.quota_bytes = g.quota;
    gs.usage = g.usage;
    gs.page_in_bytes_per_second = g.in_rate;
    gs.page_out_bytes_per_second = g.out_rate;
    gs.shrink_overdue = g.overdue;
    s.gpus.push_back(std::move(gs));
  }
  return s;
}

absl::StatusOr<NodeSnapshot> NodeState::GetStatus(const PeerCredentials& caller) const {
  MutexLock lock(&mu_);
  NodeSnapshot snap;
  snap.host_capacity_bytes = options_.host_capacity_bytes;
  snap.uptime = clock_->Now() - started_;
  snap.totals = totals_;
  for (const auto& [uuid, gpu] : gpus_) {
    GpuSnapshot gs;
    gs.gpu_uuid = uuid;
    gs.device_memory_bytes = gpu.device_memory_bytes;
    gs.reserve_bytes = std::min(options_.reserve_bytes, gpu.device_memory_bytes);
    gs.draining = gpu.draining;
    gs.clients = static_cast<uint32_t>(gpu.clients.size());
    for (ClientId id : gpu.clients) {
      const ClientGpu& g = clients_.at(id)->gpus.at(uuid);
      gs.budget_sum_bytes += g.held;
      gs.resident_sum_bytes += g.usage.resident_bytes;
    }
    snap.gpus.push_back(std::move(gs));
  }
  for (const auto& [id, c] : clients_) {
    for (const auto& [uuid, g] : c->gpus) snap.host_used_bytes += g.usage.host_bytes;
    if (authorizer_.MaySee(caller, c->creds)) snap.clients.push_back(SnapshotOf(*c));
  }
  return snap;
}

absl::StatusOr<ClientSnapshot> NodeState::GetClient(const PeerCredentials& caller,
                                                    pid_t pid) const {
  if (pid <= 0) return absl::InvalidArgumentError("pid is required");
  MutexLock lock(&mu_);
  const Client* c = FindByPid(pid);
  // Not revealing whether another user's pid is registered.
  if (c == nullptr || !authorizer_.MaySee(caller, c->creds)) {
    return absl::NotFoundError(absl::StrCat("no registered process with pid ", pid));
  }
  return SnapshotOf(*c);
}

absl::StatusOr<uint64_t> NodeState::SetQuota(const PeerCredentials& caller, pid_t pid,
                                             const std::string& gpu_uuid, uint64_t quota_bytes) {
  if (absl::Status s = authorizer_.RequireOperator(caller, "set-quota"); !s.ok()) return s;
  if (pid <= 0) return absl::InvalidArgumentError("pid is required");
  if (absl::Status s = ValidateGpuUuid(gpu_uuid); !s.ok()) return s;
  if (quota_bytes > kMaxBytes) return absl::InvalidArgumentError("quota_bytes out of range");
  MutexLock lock(&mu_);
  Client* c = FindByPid(pid);
  if (c == nullptr)
    return absl::NotFoundError(absl::StrCat("no registered process with pid ", pid));
  auto it = c->gpus.find(gpu_uuid);
  if (it == c->gpus.end()) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " does not use GPU ", gpu_uuid));
  }
  it->second.quota = quota_bytes;
  Rebalance(gpu_uuid, 0);
  LOG(INFO) << "quota of pid " << pid << " on " << gpu_uuid << " set to " << quota_bytes
            << " by uid " << caller.uid;
  return it->second.target;
}

absl::StatusOr<uint32_t> NodeState::Drain(const PeerCredentials& caller,
                                          const std::string& gpu_uuid, bool undrain) {
  if (absl::Status s = authorizer_.RequireOperator(caller, "drain"); !s.ok()) return s;
  if (absl::Status s = ValidateGpuUuid(gpu_uuid); !s.ok()) return s;
  MutexLock lock(&mu_);
  auto it = gpus_.find(gpu_uuid);
  if (it == gpus_.end()) return absl::NotFoundError("unknown GPU " + gpu_uuid);
  it->second.draining = !undrain;
  LOG(INFO) << (undrain ? "undraining " : "draining ") << gpu_uuid << " by uid " << caller.uid;
  const uint32_t notified = Rebalance(gpu_uuid, 0);
  ForgetIfUnused(gpu_uuid);
  return notified;
}

size_t NodeState::client_count() const {
  MutexLock lock(&mu_);
  return clients_.size();
}

}  // namespace memvirt::daemon

// NodeState: the daemon's model of one node: GPUs, registered client processes, their
// budgets (HBM per GPU and host tier), usage accounting and the shrink protocol.
//
// Thread safety: all public methods are thread-safe; one internal mutex serializes them.
// DirectiveSink callbacks are invoked WITH that mutex held, so a sink must only enqueue (never
// block, never call back into NodeState). The transport layer decodes messages into the plain
// types of daemon/core/types.h and validates nothing itself: every method validates its input
// and answers INVALID_ARGUMENT instead of misbehaving.
//
// Note [budget ledger]
// Per (client, GPU) the ledger keeps three numbers:
//   target  - what the arbiter (daemon/core/arbiter.h) currently wants the client to have;
//   granted - the budget last told to the client;
//   held    - the bytes reserved for the client: granted, or more while a shrink is not yet
//             acknowledged (the client may still hold its old budget in HBM).
// The invariant is sum(held) <= device memory - reserve, whenever clients comply. A shrink is
// sent at once (granted = target, deadline attached); a grow is granted only from memory that
// no one holds, so a newcomer's share becomes usable as the others acknowledge their shrinks.
// A shrink not acknowledged by its deadline is flagged overdue (status, metrics, log); its
// bytes stay held, because the daemon cannot take HBM from a process by force.
//
// Note [daemon restart]
// The daemon keeps no persistent state. Clients re-register after a restart and report the
// usage they already have; a re-registering client is held at its current residency until it
// acknowledges the budget the new arbitration gives it. For a grace period after startup
// (--restart_grace, longer than the clients' reconnect backoff) no budget grows beyond a
// client's current residency, because memory may still be held by a client that has not
// re-registered yet; when the grace period ends, Tick() rebalances every GPU. So a restart
// does not over-commit HBM as long as the clients re-register within the grace period.
//
// Note [admission]
// A newcomer's share grows only from memory no one holds: while others have not acknowledged
// their shrinks, within the restart grace period, or while the GPU is drained, what it could be
// granted is 0 or a sliver below its floor, which a process cannot run with. The daemon never
// announces such a budget: a client that holds nothing on a GPU is admitted there only once its
// grant reaches usable = max(1, min(min_bytes, target)). Until then its registration answer says
// pending (budget 0), the bytes freed for it are reserved in the ledger (granted and held) but
// not announced, and the first BUDGET directive it gets carries the whole usable grant. A
// re-registering client that holds memory is admitted at once (it is running already).
//
// Note [host tier]
// The host tier is divided like HBM (max-min fair over host_demand_bytes) when a capacity is
// configured. Host budgets change without acknowledgement (HOST_BUDGET directives); a client
// that reports more host bytes than its budget is sent one DEMOTE directive for the excess
// (host -> NVMe), and another only after it acknowledges that one.
//
// Note [GPU inventory]
// A GPU's size decides every budget on it, so only a trusted source may set it: the
// configuration (--gpu uuid:bytes; without it, the daemon's own driver query at startup,
// daemon/server/driver_inventory.h, fills NodeOptions::gpus), or the registration of a trusted
// process (an operator, or a uid in NodeOptions::gpu_size_trusted_uids, which the daemon sets to
// its own) that names a GPU the daemon does not know yet; the shim reports the device's total
// memory from the driver. A node without a driver starts with no known GPU. Any other process that
// names an unknown GPU is refused (FAILED_PRECONDITION; the shim then runs standalone), and a
// claim that disagrees with the known size is clamped to it (logged): a process can change
// neither the size nor, through it, what others get. A learned GPU is forgotten when its last
// client leaves (unless drained), so made-up UUIDs cannot accumulate; at most
// kMaxLearnedGpus are known beyond the configured ones.
#ifndef MEMVIRT_DAEMON_CORE_NODE_STATE_H_
#define MEMVIRT_DAEMON_CORE_NODE_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/authorizer.h"
#include "daemon/core/clock.h"
#include "daemon/core/types.h"

namespace memvirt::daemon {

// Receives what the daemon sends to one client. Ownership stays with the caller of Register();
// the sink must stay valid until Unregister() returns.
class DirectiveSink {
 public:
  virtual ~DirectiveSink() = default;
  // Called once, inside Register(), before any directive.
  virtual void OnRegistered(const RegisterResult& result) = 0;
  virtual void OnDirective(const Directive& directive) = 0;
  // Called inside AddGpus(), before any directive for the added GPUs: one budget per GPU.
  virtual void OnGpusAdded(const std::vector<GpuBudget>& /*budgets*/) {}
};

struct StaticGpu {
  std::string gpu_uuid;
  uint64_t device_memory_bytes = 0;
};

struct NodeOptions {
  uint64_t reserve_bytes = 0;        // HBM per GPU kept out of every budget.
  uint64_t host_capacity_bytes = 0;  // Host tier for all clients; 0 = unlimited.
  absl::Duration shrink_deadline = absl::Seconds(2);
  std::vector<StaticGpu> gpus;  // Configured inventory (Note [GPU inventory]).
  std::optional<gid_t> admin_gid;
  // After startup, budgets only grow into memory a client already holds for this long, so the
  // clients of a previous daemon can re-register first (Note [daemon restart]).
  absl::Duration restart_grace = absl::ZeroDuration();
  uint32_t hint_interval_ms = 100;
  // Besides operators, the uids whose registrations may declare an unknown GPU's size
  // (Note [GPU inventory]). The daemon passes its own effective uid.
  std::vector<uid_t> gpu_size_trusted_uids;
};

// Input limits (also documented in proto/memvirt/v1/memvirt.proto).
inline constexpr size_t kMaxGpusPerClient = 16;
inline constexpr size_t kMaxUuidLength = 128;
inline constexpr size_t kMaxProcessNameLength = 256;
inline constexpr size_t kMaxHintsPerBatch = 65536;
inline constexpr size_t kMaxLiveAllocationsPerClient = 1 << 20;
inline constexpr uint64_t kMaxBytes = uint64_t{1} << 50;  // 1 PiB: larger is a bogus value.
inline constexpr size_t kMaxLearnedGpus = 64;             // Known GPUs beyond the configured ones.

absl::Status ValidateGpuUuid(const std::string& uuid);

class NodeState {
 public:
  NodeState(NodeOptions options, const Clock* clock);
  NodeState(const NodeState&) = delete;
  NodeState& operator=(const NodeState&) = delete;

  absl::Status Validate() const;  // Options sanity (called once at startup).

  // Registers the process `peer` with `sink` (not owned). INVALID_ARGUMENT on malformed
  // input, ALREADY_EXISTS if that pid is registered already. Others may receive shrinks.
  absl::StatusOr<ClientId> Register(const PeerCredentials& peer, const Registration& reg,
                                    DirectiveSink* sink);
  // Adds GPUs to a registered client's registration (a process that starts using another
  // device) and calls its sink's OnGpusAdded with their budgets (pending as in Register).
  // INVALID_ARGUMENT on malformed claims, a GPU already registered or more than
  // kMaxGpusPerClient in all; NOT_FOUND for an unknown id; inventory refusals as Register.
  // Nothing is added unless all are. Others on those GPUs may receive shrinks.
  absl::Status AddGpus(ClientId id, const std::vector<GpuClaim>& gpus);
  // Forgets the client and reclaims its budgets and host accounting; the sink is never
  // called again after this returns. Unknown ids are ignored.
  void Unregister(ClientId id);

  absl::Status ReportHints(ClientId id, const HintBatch& batch);
  absl::Status Acknowledge(ClientId id, const DirectiveAck& ack);
  // Flags shrinks past their deadline. Call periodically.
  void Tick();

  absl::StatusOr<NodeSnapshot> GetStatus(const PeerCredentials& caller) const;
  absl::StatusOr<ClientSnapshot> GetClient(const PeerCredentials& caller, pid_t pid) const;
  // Returns the process's new target budget on that GPU.
  absl::StatusOr<uint64_t> SetQuota(const PeerCredentials& caller, pid_t pid,
                                    const std::string& gpu_uuid, uint64_t quota_bytes);
  // Returns the number of clients that received a directive.
  absl::StatusOr<uint32_t> Drain(const PeerCredentials& caller, const std::string& gpu_uuid,
                                 bool undrain);

  size_t client_count() const;

 private:
  struct ClientGpu {
    GpuClaim claim;
    uint64_t quota = 0;
    uint64_t target = 0;
    uint64_t granted = 0;
    uint64_t held = 0;
    bool admitted = true;  // Note [admission]: false until a usable grant was announced
    std::map<uint64_t, uint64_t> outstanding_shrinks;  // directive id -> budget
    absl::Time first_shrink_deadline = absl::InfiniteFuture();
    bool overdue = false;
    GpuUsage usage;
    absl::Time usage_time = absl::InfinitePast();
    absl::Time counted_since;  // baseline time of the counters (Note [reported counters])
    double in_rate = 0;
    double out_rate = 0;
  };
  struct Client {
    ClientId id = 0;
    PeerCredentials creds;
    std::string name;
    DirectiveSink* sink = nullptr;
    absl::Time since;
    uint64_t host_demand = 0;
    uint64_t host_budget = 0;
    std::map<std::string, ClientGpu> gpus;
    uint64_t iteration = 0;
    uint64_t hint_batches = 0;
    uint64_t alloc_hints = 0;
    absl::flat_hash_map<uint64_t, uint64_t> live_allocs;
    uint64_t live_alloc_bytes = 0;
    uint64_t directives_sent = 0;
    uint64_t directives_acked = 0;
    uint64_t last_directive_id = 0;
    uint64_t demote_directive_id = 0;  // Outstanding host -> NVMe request, 0 if none.
  };
  struct Gpu {
    uint64_t device_memory_bytes = 0;
    bool configured = false;
    bool draining = false;
    std::vector<ClientId> clients;  // Registration order.
  };

  absl::Status ValidateRegistration(const Registration& reg) const;
  // Checks each claim and that no uuid repeats within `seen` (which collects them).
  static absl::Status ValidateClaims(const std::vector<GpuClaim>& claims,
                                     absl::flat_hash_set<std::string>& seen);
  // Adds admitted `claims` to `c` (Note [GPU inventory]: learns unknown GPUs).
  void AttachGpus(Client& c, const std::vector<GpuClaim>& claims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The budgets to announce for `claims` of `c` (Note [admission]: 0 and pending until usable).
  std::vector<GpuBudget> AnnounceBudgets(Client& c, const std::vector<GpuClaim>& claims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // May `peer` declare the size of a GPU the daemon does not know (Note [GPU inventory])?
  bool MayDeclareGpuSize(const PeerCredentials& peer) const;
  // Checks every claim against the inventory and clamps claims to known sizes; OK only if
  // Register may proceed. Learned GPUs are not created here.
  absl::Status AdmitClaims(const PeerCredentials& peer, std::vector<GpuClaim>& claims) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets `uuid` if it is learned, unused and not drained (Note [GPU inventory]).
  void ForgetIfUnused(const std::string& uuid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t CapacityOf(const Gpu& gpu) const;
  // Recomputes targets on `uuid` and issues shrinks and grows. Directives to `quiet` are
  // suppressed (its budget travels in the Registered reply). Returns clients notified.
  uint32_t Rebalance(const std::string& uuid, ClientId quiet) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebalanceHost(ClientId quiet) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendBudget(Client& c, ClientGpu& g, bool shrink) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Note [admission]: admits a pending client whose grant became usable; true if it did.
  static bool AdmitIfUsable(ClientGpu& g);
  void Send(Client& c, Directive d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateUsage(ClientGpu& g, const GpuUsage& u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks a client over its host budget to demote the excess to NVMe (one request at a time).
  void CheckHostBudget(Client& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ClientSnapshot SnapshotOf(const Client& c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Client* FindByPid(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const Client* FindByPid(pid_t pid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const NodeOptions options_;
  const Clock* const clock_;
  const Authorizer authorizer_;
  const absl::Time started_;

  mutable absl::Mutex mu_;
  std::map<std::string, Gpu> gpus_ ABSL_GUARDED_BY(mu_);
  std::map<ClientId, std::unique_ptr<Client>> clients_ ABSL_GUARDED_BY(mu_);
  ClientId next_client_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_directive_id_ ABSL_GUARDED_BY(mu_) = 1;
  NodeTotals totals_ ABSL_GUARDED_BY(mu_);
  bool grace_over_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_NODE_STATE_H_

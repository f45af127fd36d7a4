// Plain value types of the daemon core: what the transport layer decodes requests into and
// what the core reports back. No gRPC or protobuf types appear here, so the core is tested
// without a transport.
//
// Thread safety: plain values; the usual rules for copies apply.
#ifndef MEMVIRT_DAEMON_CORE_TYPES_H_
#define MEMVIRT_DAEMON_CORE_TYPES_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "memvirt/protocol/messages.h"

namespace memvirt::daemon {

using ClientId = uint64_t;

// The client protocol's values (memvirt/protocol/messages.h), shared with the client library.
using protocol::AllocHint;
using protocol::Directive;
using protocol::DirectiveAck;
using protocol::GpuBudget;
using protocol::GpuClaim;
using protocol::GpuUsage;
using protocol::HintBatch;
using protocol::kProtocolVersion;
using protocol::Registration;

// Who is on the other end of a connection, as the kernel says (SO_PEERCRED, SO_PEERGROUPS).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // Supplementary groups; may be empty.
};

struct RegisterResult {
  ClientId client_id = 0;
  pid_t pid = 0;
  std::vector<GpuBudget> budgets;
  uint64_t host_budget_bytes = 0;  // 0 = unlimited.
};

// ---- Status snapshots ----

struct ClientGpuSnapshot {
  std::string gpu_uuid;
  uint64_t budget_bytes = 0;
  uint64_t target_bytes = 0;
  uint64_t quota_bytes = 0;
  GpuUsage usage;
  double page_in_bytes_per_second = 0;
  double page_out_bytes_per_second = 0;
  bool shrink_overdue = false;
};

struct ClientSnapshot {
  ClientId client_id = 0;
  PeerCredentials creds;
  std::string process_name;
  std::vector<ClientGpuSnapshot> gpus;
  uint64_t host_budget_bytes = 0;
  absl::Duration connected_for;
  uint64_t iteration = 0;
  // Detail counters.
  uint64_t hint_batches = 0;
  uint64_t alloc_hints = 0;
  uint64_t live_allocations = 0;
  uint64_t live_allocation_bytes = 0;
  uint64_t directives_sent = 0;
  uint64_t directives_acked = 0;
};

struct GpuSnapshot {
  std::string gpu_uuid;
  uint64_t device_memory_bytes = 0;
  uint64_t reserve_bytes = 0;
  uint64_t budget_sum_bytes = 0;  // Sum of held budgets (granted or awaiting a shrink ack).
  uint64_t resident_sum_bytes = 0;
  bool draining = false;
  uint32_t clients = 0;
};

// Node-wide totals that outlive individual clients (for counters).
struct NodeTotals {
  uint64_t paged_in_bytes = 0;
  uint64_t paged_out_bytes = 0;
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_write_bytes = 0;
  uint64_t directives_sent = 0;
  uint64_t shrinks_overdue = 0;
  uint64_t clients_registered = 0;
  uint64_t clients_reclaimed = 0;
  uint64_t implausible_reports = 0;  // usage reports whose counters were not counted
};

struct NodeSnapshot {
  std::vector<GpuSnapshot> gpus;
  std::vector<ClientSnapshot> clients;
  uint64_t host_capacity_bytes = 0;
  uint64_t host_used_bytes = 0;
  absl::Duration uptime;
  NodeTotals totals;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_TYPES_H_

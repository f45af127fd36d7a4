// The memvirt.v1 client protocol as plain C++ values: what the client library (linked into the
// shim's daemon link) sends and receives, and what the daemon decodes requests into. One set of
// structs for both ends; the conversions to and from the generated messages are in
// memvirt/protocol/convert.h (the only part that needs protobuf).
//
// This header depends on the C++ standard library only (no protobuf, gRPC or Abseil), so code
// that includes it drags no shared library with it.
//
// Thread safety: plain values; the usual rules for copies apply.
#ifndef MEMVIRT_PROTOCOL_MESSAGES_H_
#define MEMVIRT_PROTOCOL_MESSAGES_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memvirt::protocol {

// Minor version of memvirt.v1 spoken by this build, client and daemon alike (Note [protocol
// versioning] in proto/memvirt/v1/memvirt.proto). History:
//   1: registration, hints, directives, acknowledgements
//   2: AddGpusRequest / GpusAdded (one process, several GPUs)
inline constexpr uint32_t kProtocolVersion = 2;
// The first minor version whose daemon answers AddGpusRequest.
inline constexpr uint32_t kFirstVersionAddingGpus = 2;

// What a process claims on one GPU (RegisterRequest.gpus, AddGpusRequest.gpus).
struct GpuClaim {
  std::string gpu_uuid;              // As the driver reports it, e.g. "GPU-8f3c...".
  uint64_t device_memory_bytes = 0;  // The device's total memory.
  uint64_t demand_bytes = 0;         // HBM wanted; 0 = as much as possible.
  uint64_t min_bytes = 0;            // Floor needed to make progress.
};

// Usage counters of one process on one GPU.
struct GpuUsage {
  std::string gpu_uuid;
  uint64_t resident_bytes = 0;
  uint64_t host_bytes = 0;
  uint64_t nvme_bytes = 0;
  uint64_t paged_in_bytes = 0;  // Cumulative since the process started.
  uint64_t paged_out_bytes = 0;
  uint64_t nvme_read_bytes = 0;
  uint64_t nvme_write_bytes = 0;
};

struct Registration {
  uint32_t protocol_version = 0;
  std::vector<GpuClaim> gpus;
  std::string process_name;
  uint64_t host_demand_bytes = 0;
  std::vector<GpuUsage> usage;  // Carried over from a previous daemon, if any.
};

// One allocation event (lifetime hint).
struct AllocHint {
  uint64_t alloc_id = 0;
  std::string gpu_uuid;
  uint64_t bytes = 0;
  bool freed = false;
};

// One batch per report interval; never one per CUDA call.
struct HintBatch {
  uint64_t iteration = 0;
  std::vector<AllocHint> allocs;
  std::vector<GpuUsage> usage;  // Current usage, one entry per registered GPU.
};

struct DirectiveAck {
  uint64_t directive_id = 0;
  bool complied = false;
  std::optional<GpuUsage> usage;  // Must name a registered GPU when present.
};

struct Directive {
  enum class Kind { kBudget, kEvict, kDemote, kHostBudget };
  uint64_t id = 0;  // 0: informational (no acknowledgement); otherwise acknowledge it.
  Kind kind = Kind::kBudget;
  std::string gpu_uuid;                   // Empty for kHostBudget.
  uint64_t budget_bytes = 0;              // kBudget, kHostBudget (0 host budget = unlimited).
  uint64_t bytes = 0;                     // kEvict, kDemote.
  std::chrono::milliseconds deadline{0};  // Comply within this time (shrinks); 0: none.
};

struct GpuBudget {
  std::string gpu_uuid;
  uint64_t budget_bytes = 0;
  // No usable budget yet (budget_bytes is 0); a BUDGET directive brings it when it is usable
  // (Note [admission] in daemon/core/node_state.h).
  bool pending = false;
};

// The daemon's answer to a registration.
struct Registered {
  uint64_t client_id = 0;
  uint32_t pid = 0;               // The pid the daemon sees (its own pid namespace).
  uint32_t protocol_version = 0;  // The daemon's minor version.
  std::vector<GpuBudget> budgets;
  uint64_t host_budget_bytes = 0;  // 0 = unlimited.
  uint32_t hint_interval_ms = 0;
};

// The daemon's answer to an AddGpusRequest.
struct GpusAdded {
  std::vector<GpuBudget> budgets;
  std::string error;  // Non-empty: refused, nothing added.
};

}  // namespace memvirt::protocol

#endif  // MEMVIRT_PROTOCOL_MESSAGES_H_

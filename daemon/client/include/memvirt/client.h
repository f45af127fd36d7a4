// memvirt client library: what a process (the shim) uses to talk to memvirtd.
//
// A plain C++ API: no gRPC or protobuf types here. The Client connects in the background,
// registers the process (the daemon learns pid/uid/gid from the kernel, never from us),
// forwards hint batches, delivers directives (budget changes, evict/demote requests) and sends
// their acknowledgements. If the daemon is absent or dies, the state becomes kDisconnected and
// the caller runs standalone; the Client keeps retrying with exponential backoff and
// re-registers (reporting the usage it last sent, so a restarted daemon re-learns it) when the
// daemon is back.
//
// Thread safety: all methods are thread-safe. Callbacks (on_directive, on_state) run on the
// Client's own connection thread, one at a time; they must not call Close() and should return
// quickly (queue work elsewhere). No exception leaves this library.
//
// Note [initial budgets]
// On every (re-)registration the budgets granted in the daemon's reply are delivered through
// on_directive as kBudget directives with id 0, which need no acknowledgement. A directive
// with id != 0 must be acknowledged with Ack() once acted on (for a shrink: once the process
// is within the new budget), within its deadline.
//
// Note [several GPUs]
// A process that starts using another GPU adds it with AddGpu(): every later (re-)registration
// claims it, and while registered with a daemon of protocol minor version 2 or later it is added
// to the current registration at once (AddGpusRequest). Its budget arrives as for the
// registration's GPUs: an id-0 kBudget directive, or, while the daemon says pending, none until
// the first usable BUDGET directive. An older daemon learns the GPU at the next registration only.
#ifndef MEMVIRT_CLIENT_H_
#define MEMVIRT_CLIENT_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memvirt::client {

struct GpuClaim {
  std::string gpu_uuid;              // As the driver reports it, e.g. "GPU-8f3c...".
  uint64_t device_memory_bytes = 0;  // The device's total memory.
  uint64_t demand_bytes = 0;         // HBM wanted; 0 = as much as possible.
  uint64_t min_bytes = 0;            // Floor needed to make progress.
};

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

struct AllocHint {
  uint64_t alloc_id = 0;
  std::string gpu_uuid;
  uint64_t bytes = 0;
  bool freed = false;
};

struct AccessSummary {
  uint64_t alloc_id = 0;
  uint32_t accesses = 0;
  uint32_t first_launch = 0;
  uint32_t last_launch = 0;
};

// One batch per iteration (or per hint interval); never one per CUDA call.
struct HintBatch {
  uint64_t iteration = 0;
  std::vector<AllocHint> allocs;
  std::vector<AccessSummary> accesses;
  std::vector<GpuUsage> usage;  // Current usage, one entry per registered GPU.
};

struct Directive {
  enum class Kind { kBudget, kEvict, kDemote, kHostBudget };
  uint64_t id = 0;  // 0: informational (Note [initial budgets]); otherwise acknowledge it.
  Kind kind = Kind::kBudget;
  std::string gpu_uuid;                   // Empty for kHostBudget.
  uint64_t budget_bytes = 0;              // kBudget, kHostBudget (0 host budget = unlimited).
  uint64_t bytes = 0;                     // kEvict, kDemote.
  std::chrono::milliseconds deadline{0};  // Comply within this time (shrinks).
};

enum class State {
  kConnecting,    // First attempt in progress.
  kConnected,     // Registered; directives flow.
  kDisconnected,  // Daemon absent, refused us, or gone: run standalone; retrying.
  kClosed,        // Close() was called.
};
const char* StateName(State s);

struct Options {
  // Daemon socket; empty: $MEMSHIM_DAEMON_SOCKET, else /run/memvirt/memvirtd.sock.
  std::string socket_path;
  std::vector<GpuClaim> gpus;  // Required: at least one.
  std::string process_name;
  uint64_t host_demand_bytes = 0;
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{1000};
  size_t max_queued_messages = 1024;  // Outgoing; older hint batches are dropped beyond it.
  std::function<void(const Directive&)> on_directive;  // Optional; else use PollDirective().
  std::function<void(State)> on_state;                 // Optional.
};

class Client {
 public:
  // Starts connecting in the background; never fails (see state()).
  static std::unique_ptr<Client> Start(Options options);
  virtual ~Client() = default;

  virtual State state() const = 0;
  // Blocks until kConnected or the timeout; returns whether connected.
  virtual bool WaitConnected(std::chrono::milliseconds timeout) = 0;
  // Budget last granted on `gpu_uuid` (nullopt before the first registration that claims it,
  // or if the daemon refused it; 0 while pending).
  virtual std::optional<uint64_t> Budget(const std::string& gpu_uuid) const = 0;
  // True while a budget on `gpu_uuid` is expected but not granted yet: the daemon said pending
  // (Note [admission] in daemon/core/node_state.h), or an AddGpu is not answered yet.
  virtual bool BudgetPending(const std::string& /*gpu_uuid*/) const { return false; }
  // Adds a GPU to this process's registration (Note [several GPUs]). A uuid already claimed is
  // ignored.
  virtual void AddGpu(GpuClaim /*claim*/) {}
  // The pid the daemon sees for this process (0 before the first registration).
  virtual pid_t daemon_pid() const = 0;
  // Number of successful registrations so far (re-registrations included).
  virtual uint64_t registrations() const = 0;

  // Queues a batch for the daemon. While disconnected the batch is dropped, but its usage is
  // remembered for the next registration.
  virtual void SendHints(HintBatch batch) = 0;
  virtual void Ack(uint64_t directive_id, bool complied, std::optional<GpuUsage> usage) = 0;
  // When no on_directive callback is set, directives queue here.
  virtual bool PollDirective(Directive* out) = 0;

  // Ends the stream and stops the background thread. Idempotent.
  virtual void Close() = 0;
};

}  // namespace memvirt::client

#endif  // MEMVIRT_CLIENT_H_

// memvirt client library: what a process (the shim) uses to talk to memvirtd.
//
// A plain C++ API: no gRPC or protobuf types here; the values exchanged are the protocol's
// (memvirt/protocol/messages.h, shared with the daemon). The Client connects in the background,
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

#include "memvirt/protocol/messages.h"

namespace memvirt::client {

// The protocol's values (memvirt/protocol/messages.h), shared with the daemon.
using protocol::AllocHint;
using protocol::Directive;
using protocol::GpuClaim;
using protocol::GpuUsage;
using protocol::HintBatch;

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

// TierService: the daemon's side of the NVMe tier's data channel (Note [tier channel] in
// memvirt/tier_protocol.h). Owns the tier socket; one thread per connected process serves its
// store/load/discard requests against the SwapStore, reading and writing the process's staging
// memfd.
//
// Identity: a connection's tenant is the client id registered for the pid the kernel reports
// (SO_PEERCRED); a process that is not registered is refused. Every slab a connection stored is
// discarded when the connection closes (the process exited or dropped the tier), so a dead
// client's extents are freed and nothing it stored can be named by anyone else.
//
// Note [slabs per connection]: a process may hold several connections (the shim opens one per
// GPU, each driven by that GPU's core). A slab belongs to the connection that stored it: only
// that connection can load or discard it (others get kDenied), its close discards only its own
// slabs, and the idle rule looks at its own slabs; so one GPU's channel closing (a request
// deadline, an idle close) never takes another's data.
//
// Robustness: a malformed request gets a kInvalid reply (or the connection is closed if it
// cannot be framed); nothing a client sends can crash the daemon. Note [tier connection limits]:
// no local user can lock the tier out for others:
//   - at most max_connections connections at once (each has a thread);
//   - at most max_pending_per_uid connections per uid that have not finished their Hello, and
//     a peer that sends no Hello within hello_timeout is dropped;
//   - at most max_connections_per_client served connections per registered client (the shim
//     opens one per GPU; a process registers at most 16); more are answered kDenied and closed;
//   - a served connection that stores nothing on NVMe is closed after idle_timeout without a
//     request (nothing is lost; the shim reconnects when it next stores);
//   - a closed connection's descriptor is closed and its thread joined at once.
//
// Thread safety: Start/Stop from one thread; the tenant lookup callback is called from
// connection threads and must be thread-safe.
#ifndef MEMVIRT_DAEMON_SERVER_TIER_SERVICE_H_
#define MEMVIRT_DAEMON_SERVER_TIER_SERVICE_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/types.h"
#include "daemon/server/accept_backoff.h"
#include "daemon/server/latency_histogram.h"
#include "memvirt/nvme/swap_store.h"
#include "memvirt/tier_protocol.h"

namespace memvirt::daemon {

struct TierServiceOptions {
  std::string socket_path;     // created mode 0660 (replacing a stale socket)
  std::optional<gid_t> group;  // chown the socket to this group
  // Client id registered for these credentials, or nullopt if none.
  std::function<std::optional<uint64_t>(const PeerCredentials&)> tenant_of;
  // A peer has this long to send its Hello.
  absl::Duration hello_timeout = absl::Seconds(5);
  // Note [tier connection limits].
  size_t max_connections = 1024;
  size_t max_pending_per_uid = 16;
  size_t max_connections_per_client = 16;
  absl::Duration idle_timeout = absl::Minutes(5);  // InfiniteDuration: never
};

struct TierStats {
  uint64_t connections = 0;  // open now
  uint64_t stores = 0, loads = 0, discards = 0, failures = 0;
  uint64_t refused = 0;  // connections closed by a limit (Note [tier connection limits])
  // Idle timeouts that kept their connection open because it holds slabs.
  uint64_t idle_kept = 0;
  uint64_t store_io_errors = 0, load_io_errors = 0;  // kIoError or kDataLoss
  LatencyHistogram store_latency, load_latency;      // served requests
};

class TierService {
 public:
  // `store` (not owned) MUST outlive the service.
  static absl::StatusOr<std::unique_ptr<TierService>> Start(const TierServiceOptions& options,
                                                            nvme::SwapStore* store);
  // Stop().
  ~TierService();
  TierService(const TierService&) = delete;
  TierService& operator=(const TierService&) = delete;

  // Stops accepting, closes every connection (discarding its slabs), joins the threads and
  // removes the socket. Idempotent.
  void Stop();
  TierStats stats() const;

 private:
  struct Connection;
  TierService(const TierServiceOptions& options, nvme::SwapStore* store, int listen_fd);
  void AcceptLoop();
  // Accepts one connection, or refuses it by a limit.
  void AcceptOne(int fd);
  void Serve(Connection* c);
  // Why a connection may not use slab `id` it did not store (Note [slabs per connection]):
  // kPermissionDenied if it is another connection's or tenant's, kNotFound if unknown.
  absl::Status NotOwnSlab(uint64_t tenant, uint64_t id) const;
  // Waits for the next request; false if the connection should end (closed, or idle while
  // holding no slabs).
  bool AwaitRequest(Connection* c, uint64_t tenant, bool holds_slabs);
  // Claims a served slot for `tenant` (Note [tier connection limits]); false if at the limit.
  bool AdmitTenant(Connection* c, uint64_t tenant);
  void Finish(Connection* c);
  void Reap() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TierServiceOptions options_;
  nvme::SwapStore* const store_;
  int listen_fd_;
  int wake_fd_;
  int reap_fd_;  // eventfd: a connection finished
  std::thread accept_thread_;
  mutable absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  TierStats stats_ ABSL_GUARDED_BY(mu_);
  LogLimiter refusal_log_ ABSL_GUARDED_BY(mu_){absl::Seconds(10)};
};

// Maps a SwapStore status to the wire status.
tier::Status TierStatusOf(const absl::Status& s);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_TIER_SERVICE_H_

// ClientService: one Attach stream per client process (see proto/memvirt/v1/memvirt.proto).
//
// Thread safety: gRPC calls the service and its reactors from its own threads; each reactor
// serializes its writes internally and NodeState is thread-safe.
#ifndef MEMVIRT_DAEMON_SERVER_CLIENT_STREAM_SERVICE_H_
#define MEMVIRT_DAEMON_SERVER_CLIENT_STREAM_SERVICE_H_

#include <cstdint>

#include "daemon/core/node_state.h"
#include "daemon/server/peer_listener.h"
#include "daemon/server/pid_watcher.h"
#include "memvirt/v1/memvirt.grpc.pb.h"

namespace memvirt::daemon {

class ClientStreamService final : public v1::ClientService::CallbackService {
 public:
  // Not owned; must outlive the server. `pids` may be null (socket close detection only).
  ClientStreamService(NodeState* node, const PeerListener* peers, PidWatcher* pids,
                      uint32_t hint_interval_ms)
      : node_(node), peers_(peers), pids_(pids), hint_interval_ms_(hint_interval_ms) {}

  grpc::ServerBidiReactor<v1::ClientMessage, v1::DaemonMessage>* Attach(
      grpc::CallbackServerContext* context) override;

 private:
  NodeState* const node_;
  const PeerListener* const peers_;
  PidWatcher* const pids_;
  const uint32_t hint_interval_ms_;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_CLIENT_STREAM_SERVICE_H_

// OperatorService: status, per-client detail, quotas and drain for memctl.
// Authorization is NodeState's (daemon/core/authorizer.h), from kernel credentials only.
//
// Thread safety: handlers run on gRPC threads; NodeState is thread-safe.
#ifndef MEMVIRT_DAEMON_SERVER_OPERATOR_SERVICE_H_
#define MEMVIRT_DAEMON_SERVER_OPERATOR_SERVICE_H_

#include "daemon/core/node_state.h"
#include "daemon/server/peer_listener.h"
#include "memvirt/v1/memvirt.grpc.pb.h"

namespace memvirt::daemon {

class OperatorService final : public v1::OperatorService::CallbackService {
 public:
  // Not owned; must outlive the server.
  OperatorService(NodeState* node, const PeerListener* peers) : node_(node), peers_(peers) {}

  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* GetClient(grpc::CallbackServerContext* context,
                                      const v1::GetClientRequest* request,
                                      v1::ClientDetail* response) override;
  grpc::ServerUnaryReactor* SetQuota(grpc::CallbackServerContext* context,
                                     const v1::SetQuotaRequest* request,
                                     v1::SetQuotaResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;

 private:
  NodeState* const node_;
  const PeerListener* const peers_;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_OPERATOR_SERVICE_H_

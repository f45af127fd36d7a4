#include "daemon/server/operator_service.h"

#include <limits>

#include "daemon/server/proto_convert.h"

namespace memvirt::daemon {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context, const absl::Status& s) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

absl::StatusOr<pid_t> PidOf(uint32_t pid) {
  if (pid == 0 || pid > static_cast<uint32_t>(std::numeric_limits<pid_t>::max())) {
    return absl::InvalidArgumentError("pid is required and must be a valid process id");
  }
  return static_cast<pid_t>(pid);
}

}  // namespace

grpc::ServerUnaryReactor* OperatorService::GetStatus(grpc::CallbackServerContext* context,
                                                     const v1::StatusRequest* /*request*/,
                                                     v1::StatusResponse* response) {
  absl::StatusOr<PeerCredentials> peer = peers_->Lookup(context->peer());
  if (!peer.ok()) return Done(context, peer.status());
  absl::StatusOr<NodeSnapshot> snap = node_->GetStatus(*peer);
  if (snap.ok()) ToProto(*snap, response);
  return Done(context, snap.status());
}

grpc::ServerUnaryReactor* OperatorService::GetClient(grpc::CallbackServerContext* context,
                                                     const v1::GetClientRequest* request,
                                                     v1::ClientDetail* response) {
  absl::StatusOr<PeerCredentials> peer = peers_->Lookup(context->peer());
  if (!peer.ok()) return Done(context, peer.status());
  absl::StatusOr<pid_t> pid = PidOf(request->pid());
  if (!pid.ok()) return Done(context, pid.status());
  absl::StatusOr<ClientSnapshot> c = node_->GetClient(*peer, *pid);
  if (c.ok()) ToProto(*c, response);
  return Done(context, c.status());
}

grpc::ServerUnaryReactor* OperatorService::SetQuota(grpc::CallbackServerContext* context,
                                                    const v1::SetQuotaRequest* request,
                                                    v1::SetQuotaResponse* response) {
  absl::StatusOr<PeerCredentials> peer = peers_->Lookup(context->peer());
  if (!peer.ok()) return Done(context, peer.status());
  absl::StatusOr<pid_t> pid = PidOf(request->pid());
  if (!pid.ok()) return Done(context, pid.status());
  absl::StatusOr<uint64_t> target =
      node_->SetQuota(*peer, *pid, request->gpu_uuid(), request->quota_bytes());
  if (target.ok()) response->set_target_bytes(*target);
  return Done(context, target.status());
}

grpc::ServerUnaryReactor* OperatorService::Drain(grpc::CallbackServerContext* context,
                                                 const v1::DrainRequest* request,
                                                 v1::DrainResponse* response) {
  absl::StatusOr<PeerCredentials> peer = peers_->Lookup(context->peer());
  if (!peer.ok()) return Done(context, peer.status());
  absl::StatusOr<uint32_t> n = node_->Drain(*peer, request->gpu_uuid(), request->undrain());
  if (n.ok()) response->set_clients_notified(*n);
  return Done(context, n.status());
}

}  // namespace memvirt::daemon

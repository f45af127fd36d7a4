#include "daemon/server/client_message.h"

#include "daemon/server/proto_convert.h"

namespace memvirt::daemon {

absl::Status ApplyClientMessage(NodeState& node, const PeerCredentials& peer, DirectiveSink* sink,
                                const v1::ClientMessage& m, ClientId& id,
                                std::optional<v1::DaemonMessage>& reply) {
  switch (m.body_case()) {
    case v1::ClientMessage::kRegister: {
      if (id != 0) return absl::InvalidArgumentError("register: already registered");
      absl::StatusOr<ClientId> registered = node.Register(peer, FromProto(m.register_()), sink);
      if (!registered.ok()) return registered.status();
      id = *registered;
      return absl::OkStatus();
    }
    case v1::ClientMessage::kHints:
      if (id == 0) return absl::InvalidArgumentError("hints before register");
      return node.ReportHints(id, FromProto(m.hints()));
    case v1::ClientMessage::kAck:
      if (id == 0) return absl::InvalidArgumentError("ack before register");
      return node.Acknowledge(id, FromProto(m.ack()));
    case v1::ClientMessage::kAddGpus: {
      if (id == 0) return absl::InvalidArgumentError("add_gpus before register");
      // A refused claim (unknown GPU, too many) leaves the registration as it was.
      if (absl::Status s = node.AddGpus(id, FromProto(m.add_gpus())); !s.ok()) {
        reply.emplace();
        reply->mutable_gpus_added()->set_error(s.ToString());
      }
      return absl::OkStatus();
    }
    case v1::ClientMessage::BODY_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("empty client message");
}

}  // namespace memvirt::daemon

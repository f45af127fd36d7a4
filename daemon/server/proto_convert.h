// Conversions between memvirt.v1 protobuf messages and the daemon core's plain types: the client
// protocol's own (memvirt/protocol/convert.h, shared with the client library) and the
// daemon-only ones (registration answer, status). Conversions copy fields verbatim; validation
// is the core's job (daemon/core/node_state.h).
//
// Thread safety: pure functions.
#ifndef MEMVIRT_DAEMON_SERVER_PROTO_CONVERT_H_
#define MEMVIRT_DAEMON_SERVER_PROTO_CONVERT_H_

#include <vector>

#include "absl/status/status.h"
#include "daemon/core/types.h"
#include "grpcpp/support/status.h"
#include "memvirt/protocol/convert.h"
#include "memvirt/v1/memvirt.pb.h"

namespace memvirt::daemon {

using protocol::FromProto;
using protocol::ToProto;

void ToProto(const RegisterResult& r, uint32_t hint_interval_ms, v1::Registered* p);
void ToProto(const ClientSnapshot& c, v1::ClientStatus* p);
void ToProto(const ClientSnapshot& c, v1::ClientDetail* p);
void ToProto(const NodeSnapshot& s, v1::StatusResponse* p);

grpc::Status ToGrpcStatus(const absl::Status& s);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_PROTO_CONVERT_H_

// One client message applied to NodeState: what ClientStreamService does with each message a
// client stream reads, apart from the transport (gRPC, pid watching). The libFuzzer target
// tests/fuzz/node_state_fuzzer.cc drives the same function.
//
// Thread safety: as NodeState's; a stream's messages are applied one at a time.
#ifndef MEMVIRT_DAEMON_SERVER_CLIENT_MESSAGE_H_
#define MEMVIRT_DAEMON_SERVER_CLIENT_MESSAGE_H_

#include <optional>

#include "absl/status/status.h"
#include "daemon/core/node_state.h"
#include "memvirt/v1/memvirt.pb.h"

namespace memvirt::daemon {

// Applies `m`, read from the stream of `peer`, to `node`. `id` is the stream's registration
// (0 before a RegisterRequest); a successful registration sets it and makes `sink` the
// client's DirectiveSink. `reply` is set when the client must be answered directly (a refused
// AddGpusRequest). An error status ends the stream; a refusal that leaves the registration
// as it was is a reply, not an error.
absl::Status ApplyClientMessage(NodeState& node, const PeerCredentials& peer, DirectiveSink* sink,
                                const v1::ClientMessage& m, ClientId& id,
                                std::optional<v1::DaemonMessage>& reply);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_CLIENT_MESSAGE_H_

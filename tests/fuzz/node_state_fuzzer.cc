// libFuzzer target: the daemon's client and operator request handling, from proto messages to
// NodeState (daemon/core/node_state.h), without gRPC transport. The input is a script of records
// [op byte][length byte][payload]: a payload parsed as a v1::ClientMessage (ParseFromArray) on one
// of kStreams client streams, dispatched as ClientStreamService does (register first, then hints
// and acks; proto_convert's FromProto), a stream end (Unregister), a clock step with Tick(), an
// acknowledgement of a stream's latest directive, or operator calls (status, quota, drain).
// Checked: no crash or sanitizer report; requests answer with a status; once every stream has
// ended no client remains and every GPU's budget and resident sums and the host use are zero.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/node_state.h"
#include "daemon/server/client_message.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"
#include "memvirt/v1/memvirt.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace memvirt::daemon;  // NOLINT(build/namespaces): a test driver over one layer

constexpr int kStreams = 4;
constexpr char kGpu[] = "GPU-00000000-0000-0000-0000-000000000001";

// One client stream: what ClientStreamService keeps (its client id) and the directives sent.
// OnDirective runs with NodeState's mutex held: it only records.
class Stream : public DirectiveSink {
 public:
  void OnRegistered(const RegisterResult&) override {}
  void OnDirective(const Directive& d) override { directives.push_back(d); }

  ClientId id = 0;
  PeerCredentials peer;
  std::vector<Directive> directives;
};

// As ClientStreamService's reactor: the same ApplyClientMessage, a reply counted as sent.
absl::Status Handle(NodeState& node, Stream& s, const memvirt::v1::ClientMessage& m) {
  std::optional<memvirt::v1::DaemonMessage> reply;
  return ApplyClientMessage(node, s.peer, &s, m, s.id, reply);
}

void End(NodeState& node, Stream& s) {
  if (s.id != 0) node.Unregister(s.id);
  s.id = 0;
  s.directives.clear();
}

NodeOptions Options() {
  NodeOptions o;
  o.reserve_bytes = 1ull << 30;
  o.host_capacity_bytes = 64ull << 30;
  o.gpus.push_back({kGpu, 80ull << 30});
  o.restart_grace = absl::Seconds(1);
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_minloglevel = google::GLOG_ERROR;    // NodeState logs every registration and drain
  google::protobuf::SetLogHandler(nullptr);  // and protobuf every invalid UTF-8 string
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  FakeClock clock;
  NodeState node(Options(), &clock);
  Check(node.Validate().ok());
  Stream streams[kStreams];
  for (int i = 0; i < kStreams; ++i) {
    streams[i].peer.pid = 1000 + i;
    streams[i].peer.uid = i < 2 ? 1000 : 1001;  // two clients of one user, two of another
    streams[i].peer.gid = streams[i].peer.uid;
  }
  const PeerCredentials root{.pid = 1, .uid = 0, .gid = 0, .groups = {}};
  while (in.remaining_bytes() > 0) {
    const uint8_t op = in.ConsumeIntegral<uint8_t>();
    Stream& s = streams[op % kStreams];
    switch (op / kStreams % 6) {
      case 0: {
        const std::string payload = in.ConsumeBytesAsString(in.ConsumeIntegral<uint8_t>());
        memvirt::v1::ClientMessage m;
        if (m.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
          (void)Handle(node, s, m);
        }
        break;
      }
      case 1:
        End(node, s);
        break;
      case 2:
        clock.Advance(absl::Milliseconds(in.ConsumeIntegralInRange<int>(0, 5000)));
        node.Tick();
        break;
      case 3:  // a complying client acknowledges its latest directive
        if (s.id != 0 && !s.directives.empty()) {
          (void)node.Acknowledge(s.id, {.directive_id = s.directives.back().id,
                                        .complied = in.ConsumeBool(),
                                        .usage = std::nullopt});
        }
        break;
      case 4:
        (void)node.SetQuota(in.ConsumeBool() ? root : s.peer, s.peer.pid,
                            in.ConsumeBool() ? kGpu : in.ConsumeRandomLengthString(48),
                            in.ConsumeIntegral<uint64_t>());
        break;
      default:
        (void)node.Drain(in.ConsumeBool() ? root : s.peer, kGpu, in.ConsumeBool());
        (void)node.GetStatus(s.peer);
        break;
    }
  }
  for (Stream& s : streams) End(node, s);
  Check(node.client_count() == 0);
  absl::StatusOr<NodeSnapshot> status = node.GetStatus(root);
  Check(status.ok());
  Check(status->clients.empty() && status->host_used_bytes == 0);
  for (const GpuSnapshot& g : status->gpus) {
    Check(g.budget_sum_bytes == 0 && g.resident_sum_bytes == 0 && g.clients == 0);
  }
  return 0;
}

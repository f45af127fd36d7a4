// libFuzzer target: the daemon's tier protocol parser (TierService, Note [tier channel] in
// memvirt/tier_protocol.h) over a real Unix socket, in process, with a SwapStore on an in-memory
// engine. Per input one connection: a Hello (the fuzzer's bytes, with or without a staging memfd
// that may be too small or unsealed, or a well-formed one for 1-4 slots), then the fuzzer's bytes
// as requests, then end of input (shutdown). Checked: no crash or sanitizer report; after an
// accepted Hello exactly one Reply per whole Request (Note [fewer replies]), each with a known
// status; when the daemon closes the connection the tenant has no slab left.
#include <fuzzer/FuzzedDataProvider.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "daemon/server/tier_service.h"
#include "glog/logging.h"
#include "memvirt/nvme/memory_io_engine.h"
#include "memvirt/nvme/swap_store.h"
#include "memvirt/tier_protocol.h"
#include "tests/daemon/tier_test_util.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using memvirt::tier::Status;
namespace tier = memvirt::tier;

constexpr uint64_t kTenant = 7;
constexpr uint32_t kMaxSlots = 4;
constexpr size_t kMaxRequests = 64;

// One service for the whole run; every connection of this process is tenant kTenant, one at a
// time (each input waits for its connection's end).
struct World {
  std::string dir;
  memvirt::nvme::MemoryIoEngine engine{{32 * tier::kStagingSlotBytes}};
  std::unique_ptr<memvirt::nvme::SwapStore> store;
  std::unique_ptr<memvirt::daemon::TierService> service;

  World() {
    char pattern[] = "/tmp/memvirt-tier-fuzz-XXXXXX";
    Check(mkdtemp(pattern) != nullptr);
    dir = pattern;
    auto s = memvirt::nvme::SwapStore::Create(&engine, {});
    Check(s.ok());
    store = *std::move(s);
    memvirt::daemon::TierServiceOptions options{
        .socket_path = dir + "/tier.sock",
        .group = std::nullopt,
        .tenant_of = [](const memvirt::daemon::PeerCredentials& peer) -> std::optional<uint64_t> {
          if (peer.pid != getpid()) return std::nullopt;
          return kTenant;
        },
        .hello_timeout = absl::Milliseconds(200)};
    options.max_connections_per_client = 1024;  // the previous input's thread may still be reaped
    auto started = memvirt::daemon::TierService::Start(options, store.get());
    Check(started.ok());
    service = *std::move(started);
  }
};

World& TheWorld() {
  static World* world = new World;  // never destroyed: outlives every input
  return *world;
}

bool KnownStatus(Status s) {
  return static_cast<uint32_t>(s) <= static_cast<uint32_t>(Status::kInternal);
}

// A staging memfd as the fuzzer chooses: sealed and big enough, too small, or unsealed.
int StagingMemfd(FuzzedDataProvider& in, uint32_t slots) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: {  // too small
      const int fd = memfd_create("fuzz-staging", MFD_CLOEXEC | MFD_ALLOW_SEALING);
      if (fd >= 0 && ftruncate(fd, tier::kStagingSlotBytes / 2) != 0) Check(false);
      return fd;
    }
    case 1: {  // unsealed
      const int fd = memfd_create("fuzz-staging", MFD_CLOEXEC);
      if (fd >= 0 && ftruncate(fd, uint64_t{slots} * tier::kStagingSlotBytes) != 0) Check(false);
      return fd;
    }
    default:
      return tier::CreateStagingMemfd(slots);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_minloglevel = google::GLOG_ERROR;  // the service logs every connection
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  World& w = TheWorld();
  const int fd = tier::ConnectUnixSocket(w.dir + "/tier.sock");
  Check(fd >= 0);
  int memfd = -1;
  if (in.ConsumeBool()) {  // the fuzzer's bytes as the Hello, with a memfd or without
    const std::string hello = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(0, 24));
    if (in.ConsumeBool() && hello.size() >= sizeof(tier::Hello)) {
      tier::Hello h;
      std::memcpy(&h, hello.data(), sizeof(h));
      memfd = StagingMemfd(in, kMaxSlots);
      (void)tier::SendHello(fd, h, memfd);
    } else {
      (void)!send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    }
  } else {
    tier::Hello h;
    h.staging_slots = in.ConsumeIntegralInRange<uint32_t>(1, kMaxSlots);
    memfd = StagingMemfd(in, h.staging_slots);
    (void)tier::SendHello(fd, h, memfd);
  }
  if (memfd >= 0) close(memfd);
  // Requests: ops and slots mostly near the valid ones, ids mostly of slabs stored before.
  std::vector<tier::Request> requests;
  std::vector<uint64_t> ids = {0, 1, 2};
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, kMaxRequests);
  for (size_t i = 0; i < n && in.remaining_bytes() > 0; ++i) {
    tier::Request r;
    r.op = static_cast<tier::Op>(in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(1, 3)
                                                  : in.ConsumeIntegral<uint32_t>());
    r.slot = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, kMaxSlots)
                              : in.ConsumeIntegral<uint32_t>();
    r.id = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, 8)
                            : in.ConsumeIntegral<uint64_t>();
    requests.push_back(r);
  }
  const std::string tail = in.ConsumeRemainingBytesAsString();  // a torn request, or nothing
  std::string bytes(reinterpret_cast<const char*>(requests.data()),
                    requests.size() * sizeof(tier::Request));
  bytes += tail.substr(0, sizeof(tier::Request) - 1);
  // Note [fewer replies]: libFuzzer's -timeout arms a periodic SIGALRM whose handler has no
  // SA_RESTART, so a blocking send or recv of this thread may be interrupted: a loop that stopped
  // at the first EINTR (as this one once did) read a truncated answer, which looked like fewer
  // replies than requests. Both directions retry interrupted calls.
  (void)tier::SendAll(fd, bytes.data(), bytes.size());
  shutdown(fd, SHUT_WR);
  // Everything the daemon answers, up to its close.
  std::string answer;
  const bool received = memvirt::testing::ReceiveUntilClosed(fd, &answer);
  close(fd);
  if (answer.size() < sizeof(tier::HelloReply)) return 0;
  tier::HelloReply hello_reply;
  std::memcpy(&hello_reply, answer.data(), sizeof(hello_reply));
  Check(KnownStatus(hello_reply.status));
  if (hello_reply.status != Status::kOk) {
    Check(answer.size() == sizeof(tier::HelloReply));
    return 0;
  }
  Check(received);  // the service read every byte, so it closes without a reset
  Check(hello_reply.tenant == kTenant);
  // Exactly one reply per whole request (Note [fewer replies]).
  Check(answer.size() == sizeof(tier::HelloReply) + requests.size() * sizeof(tier::Reply));
  for (size_t off = sizeof(tier::HelloReply); off + sizeof(tier::Reply) <= answer.size();
       off += sizeof(tier::Reply)) {
    tier::Reply r;
    std::memcpy(&r, answer.data() + off, sizeof(r));
    Check(KnownStatus(r.status));
  }
  // The service discards the tenant's slabs when it sees the connection end, which may come
  // just after it closed the socket: wait for that, bounded.
  for (int i = 0; i < 2000 && w.store->TenantBytes(kTenant) != 0; ++i) usleep(1000);
  Check(w.store->TenantBytes(kTenant) == 0);
  return 0;
}

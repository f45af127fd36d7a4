// The NVMe tier's data channel end to end in one process: the daemon's TierService over a
// SwapStore on an in-memory engine with fault injection, and the shim's TierChannel, over a
// real Unix socket with a real staging memfd.
#include "shim/daemon_link/tier_channel.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "daemon/core/clock.h"
#include "daemon/core/node_state.h"
#include "daemon/server/metrics.h"
#include "daemon/server/tier_service.h"
#include "gtest/gtest.h"
#include "memvirt/nvme/fault_injecting_io_engine.h"
#include "memvirt/nvme/memory_io_engine.h"
#include "memvirt/nvme/swap_store.h"
#include "tests/daemon/daemon_harness.h"
#include "tests/daemon/tier_test_util.h"

namespace memvirt::daemon {
namespace {

using shim::SpillResult;
using shim::TierChannel;

constexpr uint64_t kSlot = tier::kStagingSlotBytes;

void Fill(void* p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* w = static_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < kSlot / 8; ++i) w[i] = rng();
}
bool Matches(const void* p, uint64_t seed) {
  std::vector<uint64_t> want(kSlot / 8);
  Fill(want.data(), seed);
  return std::memcmp(p, want.data(), kSlot) == 0;
}

class TierChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = nvme::SwapStore::Create(&faults_, {});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    StartService([](TierServiceOptions&) {});
  }

  // (Re)starts the service with the fixture's options as changed by `tweak`.
  void StartService(const std::function<void(TierServiceOptions&)>& tweak) {
    service_.reset();
    TierServiceOptions options{
        .socket_path = dir_.path() + "/tier.sock",
        .group = std::nullopt,
        .tenant_of = [this](const PeerCredentials& peer) -> std::optional<uint64_t> {
          if (tenant_by_pid_) return static_cast<uint64_t>(peer.pid);
          if (peer.pid != getpid() || refuse_) return std::nullopt;
          return next_tenant_++;  // every connection is another tenant here
        },
        .hello_timeout = absl::Milliseconds(300)};
    tweak(options);
    auto service = TierService::Start(options, store_.get());
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
  }

  // Stores slot 0 filled from `seed`, loads it back into the cleared slot and checks it.
  static void ExpectRoundTrip(TierChannel* c, uint64_t seed) {
    Fill(c->staging(0), seed);
    uint64_t id = 0;
    ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
    std::memset(c->staging(0), 0, kSlot);
    ASSERT_EQ(c->StartLoad(id, 0), SpillResult::kOk);
    ASSERT_EQ(c->FinishLoad(0, true), SpillResult::kOk);
    EXPECT_TRUE(Matches(c->staging(0), seed));
  }

  std::unique_ptr<TierChannel> Connect(uint32_t slots = 2) {
    const char* error = nullptr;
    auto c =
        TierChannel::Connect(dir_.path() + "/tier.sock", slots,
                             {.connect = std::chrono::seconds(5), .request = deadline_}, &error);
    EXPECT_NE(c, nullptr) << error;
    return c;
  }

  testing::TempDir dir_;
  nvme::MemoryIoEngine engine_{{64 * kSlot}};
  nvme::FaultInjectingIoEngine faults_{&engine_};
  std::unique_ptr<nvme::SwapStore> store_;
  std::unique_ptr<TierService> service_;
  std::atomic<uint64_t> next_tenant_{1};
  std::atomic<bool> refuse_{false};
  std::atomic<bool> tenant_by_pid_{false};  // a registered client per process, not per connection
  std::chrono::milliseconds deadline_{5000};
};

TEST_F(TierChannelTest, StoredChunksComeBackByteForByte) {
  auto c = Connect();
  EXPECT_EQ(c->capacity_bytes(), 64 * kSlot);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 8; ++i) {
    Fill(c->staging(i % 2), 100 + i);
    uint64_t id = 0;
    ASSERT_EQ(c->Store(i % 2, &id), SpillResult::kOk);
    ids.push_back(id);
  }
  EXPECT_EQ(store_->TenantBytes(c->tenant()), 8 * kSlot);
  // Pipelined: two loads in flight, collected in reverse order.
  for (uint64_t i = 0; i < 8; i += 2) {
    ASSERT_EQ(c->StartLoad(ids[i], 0), SpillResult::kOk);
    ASSERT_EQ(c->StartLoad(ids[i + 1], 1), SpillResult::kOk);
    ASSERT_EQ(c->FinishLoad(1, /*wait=*/true), SpillResult::kOk);
    ASSERT_EQ(c->FinishLoad(0, /*wait=*/true), SpillResult::kOk);
    EXPECT_TRUE(Matches(c->staging(0), 100 + i));
    EXPECT_TRUE(Matches(c->staging(1), 100 + i + 1));
  }
  for (uint64_t id : ids) c->Discard(id);
  ASSERT_TRUE(testing::WaitUntil([&] { return store_->TenantBytes(c->tenant()) == 0; },
                                 std::chrono::seconds(5)));
}

// Note [waits outside the lock] (shim_core.h): the core waits for a load
// without its lock while its other threads keep using the channel; the load
// keeps its outcome for FinishLoad.
TEST_F(TierChannelTest, AWaitedLoadKeepsItsOutcomeWhileOtherThreadsUseTheChannel) {
  auto c = Connect(/*slots=*/3);
  std::vector<uint64_t> ids;
  for (uint64_t i = 0; i < 2; ++i) {
    Fill(c->staging(0), 200 + i);
    uint64_t id = 0;
    ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
    ids.push_back(id);
  }
  c->WaitLoad(0);  // no load: returns at once
  ASSERT_EQ(c->StartLoad(ids[0], 0), SpillResult::kOk);
  std::thread waiter([&] { c->WaitLoad(0); });
  [&] {  // stores and loads of the other slots meanwhile
    for (uint64_t i = 0; i < 8; ++i) {
      Fill(c->staging(1), 300 + i);
      uint64_t id = 0;
      ASSERT_EQ(c->Store(1, &id), SpillResult::kOk);
      ASSERT_EQ(c->StartLoad(ids[1], 2), SpillResult::kOk);
      ASSERT_EQ(c->FinishLoad(2, /*wait=*/true), SpillResult::kOk);
      EXPECT_TRUE(Matches(c->staging(2), 201));
      c->Discard(id);
    }
  }();
  waiter.join();
  EXPECT_EQ(c->FinishLoad(0, /*wait=*/false), SpillResult::kOk) << "waited for, not pending";
  EXPECT_TRUE(Matches(c->staging(0), 200));
  EXPECT_EQ(c->FinishLoad(0, /*wait=*/false), SpillResult::kFailed) << "collected once";
}

TEST_F(TierChannelTest, ClosingTheChannelFreesItsSwap) {
  auto c = Connect();
  const uint64_t tenant = c->tenant();
  for (int i = 0; i < 4; ++i) {
    uint64_t id;
    ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
  }
  EXPECT_EQ(store_->TenantBytes(tenant), 4 * kSlot);
  c.reset();
  EXPECT_TRUE(
      testing::WaitUntil([&] { return store_->stats().used_bytes == 0; }, std::chrono::seconds(5)));
}

TEST_F(TierChannelTest, UnregisteredProcessesAreRefused) {
  refuse_ = true;
  const char* error = nullptr;
  EXPECT_EQ(TierChannel::Connect(dir_.path() + "/tier.sock", 2, {}, &error), nullptr);
  EXPECT_STREQ(error, "the daemon refused the tier connection");
}

TEST_F(TierChannelTest, DeviceErrorsAreReportedAndNothingWrongIsReturned) {
  auto c = Connect();
  // ENOSPC from the file system: the store fails, nothing is kept.
  faults_.SetNoSpaceAfter(0);
  uint64_t id = 0;
  EXPECT_EQ(c->Store(0, &id), SpillResult::kNoSpace);
  faults_.ClearFaults();
  Fill(c->staging(0), 9);
  ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
  // EIO on read: the load fails; the chunk stays stored and reads fine afterwards.
  faults_.AddReadError({});
  std::memset(c->staging(1), 0, kSlot);
  ASSERT_EQ(c->StartLoad(id, 1), SpillResult::kOk);
  EXPECT_EQ(c->FinishLoad(1, true), SpillResult::kFailed);
  faults_.ClearFaults();
  ASSERT_EQ(c->StartLoad(id, 1), SpillResult::kOk);
  EXPECT_EQ(c->FinishLoad(1, true), SpillResult::kOk);
  EXPECT_TRUE(Matches(c->staging(1), 9));
  // Unknown ids and a full swap.
  ASSERT_EQ(c->StartLoad(12345, 1), SpillResult::kOk);
  EXPECT_EQ(c->FinishLoad(1, true), SpillResult::kFailed);
  SpillResult last = SpillResult::kOk;
  for (int i = 0; i < 70 && last == SpillResult::kOk; ++i) last = c->Store(0, &id);
  EXPECT_EQ(last, SpillResult::kNoSpace);
  EXPECT_GT(service_->stats().failures, 0u);

  // Issue 14, item 8: the NVMe tier's metrics.
  FakeClock clock;
  NodeState node(NodeOptions{}, &clock);
  NodeCollector collector(&node, {service_.get(), store_.get()});
  std::map<std::string, const prometheus::MetricFamily*> by_name;
  const std::vector<prometheus::MetricFamily> families = collector.Collect();
  for (const auto& f : families) by_name[f.name] = &f;
  for (const char* name : {"memvirt_nvme_swap_used_bytes", "memvirt_nvme_swap_free_bytes",
                           "memvirt_nvme_io_errors_total", "memvirt_nvme_request_seconds"}) {
    ASSERT_TRUE(by_name.count(name)) << name;
  }
  EXPECT_EQ(by_name["memvirt_nvme_swap_used_bytes"]->metric[0].gauge.value,
            static_cast<double>(store_->stats().used_bytes));
  EXPECT_EQ(by_name["memvirt_nvme_swap_free_bytes"]->metric[0].gauge.value,
            static_cast<double>(store_->stats().capacity_bytes - store_->stats().used_bytes));
  const auto& errors = by_name["memvirt_nvme_io_errors_total"]->metric;
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0].counter.value, 0);  // store: ENOSPC is not an I/O error
  EXPECT_EQ(errors[1].counter.value, 1);  // load: the injected EIO
  const auto& latency = by_name["memvirt_nvme_request_seconds"]->metric;
  ASSERT_EQ(latency.size(), 2u);
  EXPECT_EQ(latency[0].histogram.sample_count, service_->stats().stores);
  EXPECT_EQ(latency[1].histogram.sample_count, service_->stats().loads);
  EXPECT_EQ(latency[1].histogram.bucket.back().cumulative_count, service_->stats().loads);
}

// A raw client: Hello with a one-slot memfd, then hand-made requests.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = tier::ConnectUnixSocket(path);
    EXPECT_GE(fd_, 0);
    EXPECT_TRUE(testing::SendHello(fd_, 1, &hello_reply));
  }
  ~RawClient() { close(fd_); }
  tier::Reply Call(uint32_t op, uint32_t slot, uint64_t id) {
    tier::Request r;
    r.op = static_cast<tier::Op>(op);
    r.slot = slot;
    r.id = id;
    EXPECT_EQ(send(fd_, &r, sizeof(r), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(r)));
    tier::Reply out;
    out.status = tier::Status::kInternal;
    EXPECT_EQ(recv(fd_, &out, sizeof(out), MSG_WAITALL), static_cast<ssize_t>(sizeof(out)));
    return out;
  }
  tier::HelloReply hello_reply;

 private:
  int fd_ = -1;
};

TEST_F(TierChannelTest, ATenantCannotReadAnotherTenantsChunk) {
  RawClient a(dir_.path() + "/tier.sock");
  RawClient b(dir_.path() + "/tier.sock");
  ASSERT_EQ(a.hello_reply.status, tier::Status::kOk);
  ASSERT_EQ(b.hello_reply.status, tier::Status::kOk);
  ASSERT_NE(a.hello_reply.tenant, b.hello_reply.tenant);
  const tier::Reply stored = a.Call(1, 0, 0);
  ASSERT_EQ(stored.status, tier::Status::kOk);
  EXPECT_EQ(b.Call(2, 0, stored.id).status, tier::Status::kDenied);  // load
  EXPECT_EQ(b.Call(3, 0, stored.id).status, tier::Status::kDenied);  // discard
  EXPECT_EQ(a.Call(2, 0, stored.id).status, tier::Status::kOk);      // the owner still can
}

// The channel's ids are its own: another channel cannot name them, and an id nobody stored is
// refused without asking the daemon.
TEST_F(TierChannelTest, AChannelLoadsOnlyTheIdsItStored) {
  auto a = Connect();
  auto b = Connect();
  Fill(a->staging(0), 7);
  uint64_t id = 0;
  ASSERT_EQ(a->Store(0, &id), SpillResult::kOk);
  std::memset(b->staging(0), 0, kSlot);
  ASSERT_EQ(b->StartLoad(id, 0), SpillResult::kOk);
  EXPECT_EQ(b->FinishLoad(0, true), SpillResult::kFailed);
  EXPECT_FALSE(Matches(b->staging(0), 7));
  ASSERT_EQ(a->StartLoad(id, 1), SpillResult::kOk);
  EXPECT_EQ(a->FinishLoad(1, true), SpillResult::kOk);
  EXPECT_TRUE(Matches(a->staging(1), 7));
}

TEST_F(TierChannelTest, MalformedRequestsGetInvalidAndTheConnectionGoesOn) {
  RawClient raw(dir_.path() + "/tier.sock");
  ASSERT_EQ(raw.hello_reply.status, tier::Status::kOk);
  EXPECT_EQ(raw.Call(99, 0, 0).status, tier::Status::kInvalid);       // no such op
  EXPECT_EQ(raw.Call(1, 7, 0).status, tier::Status::kInvalid);        // no such slot
  EXPECT_EQ(raw.Call(2, 0, 424242).status, tier::Status::kNotFound);  // unknown slab
  EXPECT_EQ(raw.Call(3, 0, 424242).status, tier::Status::kNotFound);  // discard it
  const tier::Reply stored = raw.Call(1, 0, 0);
  EXPECT_EQ(stored.status, tier::Status::kOk);
  EXPECT_EQ(raw.Call(2, 0, stored.id).status, tier::Status::kOk);
}

// Issue 14, item 1: a client that shrinks its staging memfd after the handshake must not be
// able to make the daemon fault (SIGBUS) on its mapping.
TEST_F(TierChannelTest, AClientThatTruncatesItsStagingCannotCrashTheDaemon) {
  const int unsealed = memfd_create("staging", MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(ftruncate(unsealed, kSlot), 0);
  const int fd = tier::ConnectUnixSocket(dir_.path() + "/tier.sock");
  ASSERT_GE(fd, 0);
  tier::HelloReply reply;
  ASSERT_TRUE(testing::SendHelloWith(fd, 1, unsealed, &reply));
  EXPECT_EQ(reply.status, tier::Status::kInvalid);
  // Truncate, then ask for a store from (and a load into) the vanished pages.
  ASSERT_EQ(ftruncate(unsealed, 0), 0);
  const tier::Request requests[2] = {{tier::Op::kStore, 0, 0}, {tier::Op::kLoad, 0, 1}};
  (void)send(fd, requests, sizeof(requests), MSG_NOSIGNAL);
  tier::Reply out;
  EXPECT_LE(recv(fd, &out, sizeof(out), MSG_WAITALL), 0);  // closed: nothing was served
  close(fd);
  close(unsealed);

  // A sealed staging area cannot shrink, so the same trick fails in the client.
  const int sealed = tier::CreateStagingMemfd(1);
  ASSERT_GE(sealed, 0);
  EXPECT_NE(ftruncate(sealed, 0), 0);
  EXPECT_EQ(errno, EPERM);
  close(sealed);

  // The service is alive and serves a well-behaved client.
  auto c = Connect(1);
  ASSERT_NE(c, nullptr);
  ExpectRoundTrip(c.get(), 31);
}

TEST_F(TierChannelTest, APeerThatSendsNoHelloIsDropped) {
  const int fd = tier::ConnectUnixSocket(dir_.path() + "/tier.sock");
  ASSERT_GE(fd, 0);
  tier::HelloReply reply;
  reply.status = tier::Status::kOk;
  // The service answers kInvalid once the hello timeout passes, then closes.
  EXPECT_EQ(recv(fd, &reply, sizeof(reply), MSG_WAITALL), static_cast<ssize_t>(sizeof(reply)));
  EXPECT_EQ(reply.status, tier::Status::kInvalid);
  char byte;
  EXPECT_EQ(recv(fd, &byte, 1, 0), 0);
  close(fd);
}

TEST_F(TierChannelTest, ADaemonThatGoesAwayBreaksTheChannelWithoutHanging) {
  auto c = Connect(1);
  uint64_t id = 0;
  ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
  EXPECT_EQ(c->Store(5, &id), SpillResult::kFailed);  // refused locally: no such slot
  service_->Stop();
  EXPECT_EQ(c->Store(0, &id), SpillResult::kBroken);
  EXPECT_EQ(c->StartLoad(id, 0), SpillResult::kBroken);
}

// Issue 14 (found by shim_chaos_test): after the daemon is killed and restarted, the channel
// reopens with a new handshake (Note [reopening] in shim/daemon_link/tier_channel.h); what the
// old daemon held is a clean failure, never other bytes, and new stores and loads work again.
TEST_F(TierChannelTest, AfterADaemonRestartTheChannelReopensAndLostSlabsFailCleanly) {
  auto c = Connect(2);
  std::vector<uint64_t> old_ids;
  for (uint64_t seed = 100; seed < 104; ++seed) {
    Fill(c->staging(0), seed);
    uint64_t id = 0;
    ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
    old_ids.push_back(id);
  }
  // The daemon dies with its swap; a new one starts on the same socket, numbering slabs anew.
  service_.reset();
  uint64_t unused = 0;
  EXPECT_EQ(c->Store(0, &unused), SpillResult::kBroken);  // nobody there: fails at once
  auto fresh = nvme::SwapStore::Create(&faults_, {});
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  store_ = *std::move(fresh);
  StartService([](TierServiceOptions&) {});
  std::vector<uint64_t> new_ids;
  ASSERT_TRUE(testing::WaitUntil(
      [&] {
        Fill(c->staging(0), 200);
        uint64_t id = 0;
        if (c->Store(0, &id) != SpillResult::kOk) return false;
        new_ids.push_back(id);
        return true;
      },
      std::chrono::seconds(10)));
  for (uint64_t seed = 201; seed < 206; ++seed) {
    Fill(c->staging(1), seed);
    uint64_t id = 0;
    ASSERT_EQ(c->Store(1, &id), SpillResult::kOk);
    new_ids.push_back(id);
  }
  EXPECT_EQ(c->live_slabs(), new_ids.size());
  EXPECT_EQ(store_->TenantBytes(c->tenant()), new_ids.size() * kSlot);
  const std::vector<uint8_t> zeros(kSlot, 0);
  for (uint64_t old_id : old_ids) {  // lost: a failure, and no bytes land in the staging
    std::memset(c->staging(0), 0, kSlot);
    ASSERT_EQ(c->StartLoad(old_id, 0), SpillResult::kOk);
    EXPECT_EQ(c->FinishLoad(0, true), SpillResult::kFailed);
    EXPECT_EQ(std::memcmp(c->staging(0), zeros.data(), kSlot), 0);
  }
  for (size_t i = 0; i < new_ids.size(); ++i) {
    std::memset(c->staging(i % 2), 0, kSlot);
    ASSERT_EQ(c->StartLoad(new_ids[i], i % 2), SpillResult::kOk);
    ASSERT_EQ(c->FinishLoad(i % 2, true), SpillResult::kOk);
    EXPECT_TRUE(Matches(c->staging(i % 2), 200 + i)) << i;
  }
  for (uint64_t id : old_ids) c->Discard(id);  // nothing to tell the new daemon
  for (uint64_t id : new_ids) c->Discard(id);
  EXPECT_EQ(c->live_slabs(), 0u);
  ASSERT_TRUE(
      testing::WaitUntil([&] { return store_->stats().used_bytes == 0; }, std::chrono::seconds(5)));
}

// Issue 14, item 4: the tier socket cannot be locked out.
size_t OpenDescriptors() {
  size_t n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

TEST_F(TierChannelTest, ConnectionsHeldBeforeTheHelloByAnotherUserDoNotLockOutOthers) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the other user's process";
  StartService([&](TierServiceOptions& o) {
    o.group = testing::HeldAsNobody::kNobody;
    o.max_connections = 64;
    o.max_pending_per_uid = 8;
    o.hello_timeout = absl::Seconds(30);  // held for the whole test
  });
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  // The other user connects 64 times, sends nothing and holds the connections.
  testing::HeldAsNobody other([&] {
    char connected = 0;
    for (int i = 0; i < 64; ++i) {
      connected += tier::ConnectUnixSocket(dir_.path() + "/tier.sock") >= 0 ? 1 : 0;
    }
    return connected;
  });
  EXPECT_GT(other.Result().value_or(0), 8);
  ASSERT_TRUE(
      testing::WaitUntil([&] { return service_->stats().refused >= 40; }, std::chrono::seconds(5)))
      << service_->stats().refused;
  auto c = Connect(1);  // another user (root) still gets its tier
  ASSERT_NE(c, nullptr);
  uint64_t id = 0;
  EXPECT_EQ(c->Store(0, &id), SpillResult::kOk);
  EXPECT_TRUE(other.Release());
}

TEST_F(TierChannelTest, ARegisteredProcessGetsItsConnectionsAndItsSlotBackAtOnce) {
  StartService([](TierServiceOptions& o) { o.max_connections_per_client = 2; });
  tenant_by_pid_ = true;
  RawClient second_gpu(dir_.path() + "/tier.sock");
  ASSERT_EQ(second_gpu.hello_reply.status, tier::Status::kOk);
  auto first = std::make_unique<RawClient>(dir_.path() + "/tier.sock");
  ASSERT_EQ(first->hello_reply.status, tier::Status::kOk);
  for (int i = 0; i < 8; ++i) {
    RawClient more(dir_.path() + "/tier.sock");
    EXPECT_EQ(more.hello_reply.status, tier::Status::kDenied);
  }
  EXPECT_GE(service_->stats().refused, 8u);
  first.reset();
  // The slot is free as soon as the daemon has seen the close.
  ASSERT_TRUE(testing::WaitUntil([&] { return service_->stats().connections == 1; },
                                 std::chrono::seconds(2)));
  RawClient again(dir_.path() + "/tier.sock");
  EXPECT_EQ(again.hello_reply.status, tier::Status::kOk);
}

// Note [slabs per connection]: one process, one channel per GPU. Each channel loads only what it
// stored, and one channel closing leaves the other's slabs.
TEST_F(TierChannelTest, TwoChannelsOfOneProcessKeepTheirOwnSlabs) {
  tenant_by_pid_ = true;
  auto gpu0 = Connect();
  auto gpu1 = Connect();
  ASSERT_NE(gpu0, nullptr);
  ASSERT_NE(gpu1, nullptr);
  ASSERT_EQ(gpu0->tenant(), gpu1->tenant());
  Fill(gpu0->staging(0), 50);
  Fill(gpu1->staging(0), 51);
  uint64_t id0 = 0, id1 = 0;
  ASSERT_EQ(gpu0->Store(0, &id0), SpillResult::kOk);
  ASSERT_EQ(gpu1->Store(0, &id1), SpillResult::kOk);
  // Another connection's slab of the same tenant is refused by the daemon itself.
  RawClient raw(dir_.path() + "/tier.sock");
  ASSERT_EQ(raw.hello_reply.status, tier::Status::kOk);
  ASSERT_EQ(store_->stats().slabs, 2u);
  int denied = 0;
  for (uint64_t daemon_id = 0; daemon_id < 64; ++daemon_id) {
    const tier::Status load = raw.Call(2, 0, daemon_id).status;
    EXPECT_TRUE(load == tier::Status::kDenied || load == tier::Status::kNotFound)
        << static_cast<int>(load);
    denied += load == tier::Status::kDenied ? 1 : 0;
  }
  EXPECT_EQ(denied, 2);  // the two slabs, whatever their daemon ids
  gpu0.reset();          // one GPU's channel goes away with its slab
  ASSERT_TRUE(
      testing::WaitUntil([&] { return store_->stats().slabs == 1; }, std::chrono::seconds(2)));
  std::memset(gpu1->staging(0), 0, kSlot);
  ASSERT_EQ(gpu1->StartLoad(id1, 0), SpillResult::kOk);
  ASSERT_EQ(gpu1->FinishLoad(0, true), SpillResult::kOk);
  EXPECT_TRUE(Matches(gpu1->staging(0), 51));
}

TEST_F(TierChannelTest, ClosedConnectionsReleaseTheirDescriptorsAtOnce) {
  const size_t before = OpenDescriptors();
  {
    std::vector<std::unique_ptr<RawClient>> clients;
    for (int i = 0; i < 16; ++i) {
      clients.push_back(std::make_unique<RawClient>(dir_.path() + "/tier.sock"));
      ASSERT_EQ(clients.back()->hello_reply.status, tier::Status::kOk);
    }
    EXPECT_GE(OpenDescriptors(), before + 32);  // both ends of each
  }
  // No further connection arrives: the service must release them by itself.
  EXPECT_TRUE(
      testing::WaitUntil([&] { return OpenDescriptors() <= before; }, std::chrono::seconds(2)))
      << OpenDescriptors() << " open, " << before << " before";
}

TEST_F(TierChannelTest, AnIdleConnectionIsClosedOnlyWhenItStoresNothingAndReopensOnUse) {
  StartService([](TierServiceOptions& o) { o.idle_timeout = absl::Milliseconds(200); });
  auto c = Connect(1);
  ASSERT_NE(c, nullptr);
  Fill(c->staging(0), 41);
  uint64_t id = 0;
  ASSERT_EQ(c->Store(0, &id), SpillResult::kOk);
  // Idle past the timeout twice while holding a slab: the service saw it and kept it open.
  ASSERT_TRUE(testing::WaitUntil([&] { return service_->stats().idle_kept >= 2; },
                                 std::chrono::seconds(10)));
  EXPECT_EQ(service_->stats().connections, 1u);
  std::memset(c->staging(0), 0, kSlot);
  ASSERT_EQ(c->StartLoad(id, 0), SpillResult::kOk);
  ASSERT_EQ(c->FinishLoad(0, true), SpillResult::kOk);
  EXPECT_TRUE(Matches(c->staging(0), 41));
  c->Discard(id);
  ASSERT_TRUE(testing::WaitUntil([&] { return service_->stats().connections == 0; },
                                 std::chrono::seconds(3)));
  // The next store reopens the channel with the same staging area.
  ExpectRoundTrip(c.get(), 42);
}

// Issue 14, the tier-protocol fuzzer's Note [fewer replies]: one reply per whole request, also
// when the Hello arrives in pieces and when the client's reads are interrupted by signals.
TEST_F(TierChannelTest, AHelloSentInTwoPiecesIsCompleted) {
  const int fd = tier::ConnectUnixSocket(dir_.path() + "/tier.sock");
  ASSERT_GE(fd, 0);
  const int memfd = tier::CreateStagingMemfd(1);
  ASSERT_GE(memfd, 0);
  tier::Hello hello;
  hello.staging_slots = 1;
  // The first 4 bytes carry the memfd; Linux ends a stream read after the segment that carried
  // descriptors, so the service's first read is short (Note [short hello]).
  char bytes[sizeof(hello)];
  std::memcpy(bytes, &hello, sizeof(hello));
  ASSERT_TRUE(tier::SendWithDescriptor(fd, bytes, 4, memfd));
  close(memfd);
  // Whether or not the service has read the first piece yet, its read ends after it.
  ASSERT_TRUE(tier::SendAll(fd, bytes + 4, sizeof(bytes) - 4));
  tier::HelloReply reply;
  ASSERT_TRUE(tier::ReceiveAll(fd, &reply, sizeof(reply)));
  EXPECT_EQ(reply.status, tier::Status::kOk);
  const tier::Request store = {tier::Op::kStore, 0, 0};
  ASSERT_TRUE(tier::SendAll(fd, &store, sizeof(store)));
  tier::Reply out;
  ASSERT_TRUE(tier::ReceiveAll(fd, &out, sizeof(out)));
  EXPECT_EQ(out.status, tier::Status::kOk);
  close(fd);
}

std::atomic<int> interrupts{0};
void CountInterrupt(int) { interrupts.fetch_add(1); }

// True once thread `tid` of this process sleeps (state S in /proc).
bool Sleeping(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  const char* after_name = read ? std::strrchr(line, ')') : nullptr;
  return after_name != nullptr && after_name[1] == ' ' && after_name[2] == 'S';
}

TEST_F(TierChannelTest, EveryRequestIsAnsweredWhileSignalsInterruptTheClientsReads) {
  // A handler without SA_RESTART, as libFuzzer's SIGALRM: a blocking recv fails with EINTR.
  struct sigaction action = {}, previous = {};
  action.sa_handler = CountInterrupt;
  ASSERT_EQ(sigaction(SIGUSR1, &action, &previous), 0);
  const int fd = tier::ConnectUnixSocket(dir_.path() + "/tier.sock");
  ASSERT_GE(fd, 0);
  tier::HelloReply hello;
  ASSERT_TRUE(testing::SendHello(fd, 2, &hello));
  ASSERT_EQ(hello.status, tier::Status::kOk);

  std::atomic<pid_t> reader_tid{0};
  std::string answer;
  bool received = false;
  std::thread reader([&] {
    reader_tid = gettid();
    received = testing::ReceiveUntilClosed(fd, &answer);
  });
  ASSERT_TRUE(testing::WaitUntil([&] { return reader_tid != 0 && Sleeping(reader_tid); },
                                 std::chrono::seconds(5)));
  interrupts = 0;
  ASSERT_EQ(pthread_kill(reader.native_handle(), SIGUSR1), 0);  // interrupts its blocking recv
  ASSERT_TRUE(testing::WaitUntil([] { return interrupts > 0; }, std::chrono::seconds(5)));
  constexpr size_t kRequests = 24;
  std::vector<tier::Request> requests;
  for (size_t i = 0; i < kRequests; ++i) {
    requests.push_back({static_cast<tier::Op>(1 + i % 3), static_cast<uint32_t>(i % 3), i});
  }
  ASSERT_TRUE(tier::SendAll(fd, requests.data(), requests.size() * sizeof(tier::Request)));
  shutdown(fd, SHUT_WR);
  reader.join();
  close(fd);
  sigaction(SIGUSR1, &previous, nullptr);
  EXPECT_TRUE(received);
  EXPECT_EQ(answer.size(), kRequests * sizeof(tier::Reply));
}

}  // namespace
}  // namespace memvirt::daemon

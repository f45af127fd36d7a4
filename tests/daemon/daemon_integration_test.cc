// memvirtd end to end: real daemon, memctl and client processes on a temp socket.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_harness.h"

namespace memvirt::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kGpu[] = "GPU-00000000-0000-0000-0000-00000000aaaa";
constexpr uint64_t kMiB = 1 << 20;

class DaemonTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

TEST_F(DaemonTest, ServesOnSocketWithMode0660AndReportsStatus) {
  Daemon d(dir_.path(), {"--gpu=" + std::string(kGpu) + ":8G", "--reserve=512M"});
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  struct stat st;
  ASSERT_EQ(stat(d.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  CommandResult table = d.Memctl({"status"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("GPU-00000000-0000-00"));
  EXPECT_THAT(table.out, HasSubstr("RESIDENT"));
  CommandResult bare = d.Memctl({"status", "--no-headers"});
  EXPECT_THAT(bare.out, ::testing::Not(HasSubstr("RESIDENT")));

  auto json = d.StatusJson();
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(Field(*json, "version"), 1);
  const auto& gpu = json->fields().at("gpus").list_value().values(0).struct_value();
  EXPECT_EQ(gpu.fields().at("uuid").string_value(), kGpu);
  EXPECT_EQ(Field(gpu, "device_memory_bytes"), 8.0 * (1ull << 30));
  EXPECT_EQ(Field(gpu, "reserve_bytes"), 512.0 * kMiB);
  EXPECT_EQ(Processes(*json).values_size(), 0);
}

#ifdef MEMVIRT_SIM_LIB_DIR
// Issue 14, item 4: without --gpu the daemon asks the driver (here the simulated one, found on
// the library path) for the GPUs and their sizes; without a driver it starts all the same.
TEST_F(DaemonTest, WithoutGpuFlagsTheDriversDevicesAreTheKnownGpus) {
  const std::vector<std::string> sim_env = {
      "LD_LIBRARY_PATH=" MEMVIRT_SIM_LIB_DIR, "MEMSIM_DEVICE_COUNT=2", "MEMSIM_DEVICE_MEMORY=3G",
      "MEMSIM_NODE=memvirt-driver-query-" + std::to_string(getpid())};
  Daemon d(dir_.path(), {"--reserve=0"}, sim_env);
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto json = d.StatusJson();
  ASSERT_TRUE(json.has_value());
  const auto& gpus = json->fields().at("gpus").list_value();
  ASSERT_EQ(gpus.values_size(), 2);  // known before any process registered
  std::set<std::string> uuids;
  for (const auto& g : gpus.values()) {
    const std::string uuid = g.struct_value().fields().at("uuid").string_value();
    EXPECT_THAT(uuid, ::testing::MatchesRegex(
                          "GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
    uuids.insert(uuid);
    EXPECT_EQ(Field(g.struct_value(), "device_memory_bytes"), 3.0 * (1ull << 30));
  }
  EXPECT_EQ(uuids.size(), 2u);
  // A process that claims another size for a driver-known GPU changes nothing.
  auto client = d.StartClient(
      {"--gpu=" + *uuids.begin(), "--device-bytes=1", "--pages=1", "--iterations=100000"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        return s.has_value() && Processes(*s).values_size() == 1;
      },
      seconds(10)));
  json = d.StatusJson();
  for (const auto& g : json->fields().at("gpus").list_value().values()) {
    EXPECT_EQ(Field(g.struct_value(), "device_memory_bytes"), 3.0 * (1ull << 30));
  }
}

TEST_F(DaemonTest, WithoutADriverTheDaemonStartsAndLearnsGpusFromTrustedClients) {
  Daemon d(dir_.path(), {"--driver_library=" + dir_.path() + "/no-such-libcuda.so.1"});
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto json = d.StatusJson();
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->fields().at("gpus").list_value().values_size(), 0);
  EXPECT_THAT(d.process().Stderr(), HasSubstr("no GPUs from the driver"));
}
#endif  // MEMVIRT_SIM_LIB_DIR

TEST_F(DaemonTest, MemctlSaysClearlyWhenDaemonIsNotRunning) {
  Daemon d(dir_.path(), {});
  CommandResult r = d.Memctl({"status"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("memvirtd is not running"));
  EXPECT_EQ(d.Memctl({"health"}).exit_code, 3);
  EXPECT_EQ(d.Memctl({"frobnicate"}).exit_code, 2);
}

TEST_F(DaemonTest, SigtermShutsDownCleanly) {
  Daemon d(dir_.path(), {});
  ASSERT_TRUE(d.Start());
  CommandResult h = d.Memctl({"health"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_THAT(h.out, HasSubstr("SERVING"));
  auto client = d.StartClient({"--iterations=100000", "--iteration-ms=5"});
  ASSERT_TRUE(WaitUntil([&] { return client->Stdout().find("registered") != std::string::npos; },
                        seconds(5)));
  d.Kill(SIGTERM);
  EXPECT_EQ(d.Wait(seconds(5)), std::optional<int>(0)) << d.process().Stderr();
  struct stat st;
  EXPECT_NE(stat(d.socket().c_str(), &st), 0) << "socket left behind";
  EXPECT_THAT(d.process().Stderr(), HasSubstr("shutting down"));
  // The client notices and falls back to standalone mode.
  EXPECT_TRUE(
      WaitUntil([&] { return client->Stdout().find("state disconnected") != std::string::npos; },
                seconds(2)));
}

TEST_F(DaemonTest, RefusesToStartOverALiveDaemon) {
  Daemon a(dir_.path(), {});
  ASSERT_TRUE(a.Start());
  Daemon b(dir_.path(), {});
  b.Start();  // memctl health may reach `a`: judge `b` by its exit code.
  EXPECT_EQ(b.Wait(seconds(5)), std::optional<int>(1));
  EXPECT_THAT(b.process().Stderr(), HasSubstr("another daemon"));
  EXPECT_EQ(a.Memctl({"health"}).exit_code, 0);
}

// Three processes whose demands together exceed the GPU: each gets a third, all stay within
// their budgets, and all finish with intact data.
TEST_F(DaemonTest, ThreeClientsShareOneGpuWithinBudgets) {
  Daemon d(dir_.path(), {"--reserve=0", "--restart_grace_ms=0"});
  ASSERT_TRUE(d.Start());
  constexpr int kPages = 200, kIters = 400;
  std::vector<std::unique_ptr<Subprocess>> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(d.StartClient({Flag("device-bytes", 300 * kMiB), Flag("pages", kPages),
                                     Flag("iterations", kIters), "--iteration-ms=5"}));
  }
  // Settled: every process registered with its own pid, budget = capacity / 3, resident within.
  bool settled = WaitUntil(
      [&] {
        auto s = d.StatusJson();
        if (!s || Processes(*s).values_size() != 3) return false;
        for (auto& c : clients) {
          const auto* p = FindProcess(*s, c->pid());
          if (p == nullptr) return false;
          const auto& g = FirstGpu(*p);
          if (Field(g, "budget_bytes") != 100.0 * kMiB) return false;
          if (Field(g, "resident_bytes") > Field(g, "budget_bytes")) return false;
          if (Field(g, "resident_bytes") <= 0) return false;
        }
        return true;
      },
      seconds(10));
  ASSERT_TRUE(settled) << d.Memctl({"status"}).out;
  // While they run, the sum of budgets never exceeds the device.
  for (int i = 0; i < 20; ++i) {
    auto s = d.StatusJson();
    ASSERT_TRUE(s.has_value());
    const auto& gpu = s->fields().at("gpus").list_value().values(0).struct_value();
    EXPECT_LE(Field(gpu, "budget_sum_bytes"), 300.0 * kMiB);
    for (const auto& p : Processes(*s).values()) {
      const auto& g = FirstGpu(p.struct_value());
      EXPECT_LE(Field(g, "resident_bytes"), Field(g, "budget_bytes"));
    }
  }
  const std::string want = "checksum=" + ExpectedChecksum(kPages, kIters);
  for (auto& c : clients) {
    ASSERT_EQ(c->Wait(seconds(20)), std::optional<int>(0)) << c->Stderr();
    EXPECT_THAT(c->Stdout(), HasSubstr(want));
    EXPECT_THAT(c->Stdout(), HasSubstr("registered pid=" + std::to_string(c->pid())));
  }
}

TEST_F(DaemonTest, ClientWithoutDaemonRunsStandalone) {
  Daemon d(dir_.path(), {});  // Never started.
  auto c = d.StartClient(
      {"--pages=50", "--iterations=100", "--iteration-ms=1", "--wait-connected-ms=200"});
  ASSERT_EQ(c->Wait(seconds(10)), std::optional<int>(0)) << c->Stderr();
  EXPECT_THAT(c->Stdout(), HasSubstr("state disconnected"));
  EXPECT_THAT(c->Stdout(), HasSubstr("checksum=" + ExpectedChecksum(50, 100)));
  EXPECT_THAT(c->Stdout(), HasSubstr("registrations=0"));
}

TEST_F(DaemonTest, UnackedShrinkIsFlaggedAndNotOvercommitted) {
  Daemon d(dir_.path(), {"--reserve=0", "--restart_grace_ms=0", "--shrink_deadline_ms=200"});
  ASSERT_TRUE(d.Start());
  auto stubborn = d.StartClient(
      {Flag("device-bytes", 400 * kMiB), "--iterations=100000", "--ignore-directives"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        return s && FindProcess(*s, stubborn->pid()) != nullptr;
      },
      seconds(5)));
  auto polite = d.StartClient({Flag("device-bytes", 400 * kMiB), "--iterations=100000"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        const auto* p = s ? FindProcess(*s, stubborn->pid()) : nullptr;
        return p != nullptr && FirstGpu(*p).fields().at("shrink_overdue").bool_value();
      },
      seconds(5)))
      << d.Memctl({"status"}).out;
  auto s = d.StatusJson();
  const auto& gpu = s->fields().at("gpus").list_value().values(0).struct_value();
  EXPECT_LE(Field(gpu, "budget_sum_bytes"), 400.0 * kMiB);
  const auto* p = FindProcess(*s, polite->pid());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(Field(FirstGpu(*p), "budget_bytes"), 0);
}

TEST_F(DaemonTest, OperatorCommandsSetQuotaAndDrain) {
  Daemon d(dir_.path(), {"--reserve=0", "--restart_grace_ms=0"});
  ASSERT_TRUE(d.Start());
  auto c = d.StartClient({Flag("device-bytes", 400 * kMiB), "--iterations=100000"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        return s && FindProcess(*s, c->pid()) != nullptr;
      },
      seconds(5)));
  const std::string pid = std::to_string(c->pid());
  CommandResult q = d.Memctl({"set-quota", pid, kGpu, "64M"});
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_THAT(q.out, HasSubstr("67108864 bytes"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        const auto& g = FirstGpu(*FindProcess(*s, c->pid()));
        return Field(g, "budget_bytes") == 64.0 * kMiB && Field(g, "resident_bytes") <= 64.0 * kMiB;
      },
      seconds(3)));
  CommandResult detail = d.Memctl({"client", pid, "--json"});
  ASSERT_EQ(detail.exit_code, 0) << detail.err;
  EXPECT_THAT(detail.out, HasSubstr("\"quota_bytes\":67108864"));
  ASSERT_EQ(d.Memctl({"drain", kGpu}).exit_code, 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        const auto& g = FirstGpu(*FindProcess(*s, c->pid()));
        return Field(g, "budget_bytes") == 0;
      },
      seconds(3)));
  ASSERT_EQ(d.Memctl({"drain", kGpu, "--undo"}).exit_code, 0);
  ASSERT_EQ(d.Memctl({"set-quota", pid, kGpu, "none"}).exit_code, 0);
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        return Field(FirstGpu(*FindProcess(*s, c->pid())), "budget_bytes") == 400.0 * kMiB;
      },
      seconds(3)));
  // Bad requests are refused with INVALID_ARGUMENT / NOT_FOUND, not crashes.
  CommandResult bad = d.Memctl({"set-quota", "999999", kGpu, "1G"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.err, HasSubstr("not found"));
  EXPECT_EQ(d.Memctl({"set-quota", pid, "GPU with space", "1G"}).exit_code, 1);
  EXPECT_EQ(d.Memctl({"drain", "GPU-unknown"}).exit_code, 1);
  EXPECT_EQ(d.Memctl({"health"}).exit_code, 0);
}

TEST_F(DaemonTest, OtherUsersSeeOnlyTheirOwnAndCannotOperate) {
  const std::vector<std::string> nobody = AsNobody();
  if (nobody.empty()) GTEST_SKIP() << "setpriv not found: cannot run as another uid";
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to uid 65534";
  // The socket's group is nogroup so that uid 65534 may connect at all (mode 0660).
  Daemon d(dir_.path(), {"--reserve=0", "--restart_grace_ms=0", "--socket_group=65534"});
  ASSERT_TRUE(d.Start());
  auto root_client = d.StartClient({Flag("device-bytes", 400 * kMiB), "--iterations=100000"});
  auto nobody_client =
      d.StartClient({Flag("device-bytes", 400 * kMiB), "--iterations=100000"}, nobody);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        return s && Processes(*s).values_size() == 2;
      },
      seconds(5)))
      << nobody_client->Stderr();
  // Identity comes from the kernel: the daemon sees uid 65534 for the setpriv'd client.
  auto all = d.StatusJson();
  const auto* np = FindProcess(*all, nobody_client->pid());
  ASSERT_NE(np, nullptr);
  EXPECT_EQ(Field(*np, "uid"), 65534);
  EXPECT_EQ(Field(*FindProcess(*all, root_client->pid()), "uid"), 0);

  auto mine = d.StatusJson(nobody);
  ASSERT_TRUE(mine.has_value());
  ASSERT_EQ(Processes(*mine).values_size(), 1);
  EXPECT_NE(FindProcess(*mine, nobody_client->pid()), nullptr);

  const std::string root_pid = std::to_string(root_client->pid());
  CommandResult q = d.Memctl({"set-quota", root_pid, kGpu, "1M"}, nobody);
  EXPECT_EQ(q.exit_code, 1);
  EXPECT_THAT(q.err, HasSubstr("permission denied"));
  CommandResult own =
      d.Memctl({"set-quota", std::to_string(nobody_client->pid()), kGpu, "1M"}, nobody);
  EXPECT_EQ(own.exit_code, 1);  // Quotas are an operator action even on one's own process.
  CommandResult dr = d.Memctl({"drain", kGpu}, nobody);
  EXPECT_EQ(dr.exit_code, 1);
  EXPECT_THAT(dr.err, HasSubstr("permission denied"));
  CommandResult peek = d.Memctl({"client", root_pid}, nobody);
  EXPECT_EQ(peek.exit_code, 1);
  EXPECT_THAT(peek.err, HasSubstr("not found"));
  // Nothing changed.
  auto after = d.StatusJson();
  EXPECT_EQ(Field(FirstGpu(*FindProcess(*after, root_client->pid())), "quota_bytes"), 0);
  EXPECT_FALSE(after->fields()
                   .at("gpus")
                   .list_value()
                   .values(0)
                   .struct_value()
                   .fields()
                   .at("draining")
                   .bool_value());
}

TEST_F(DaemonTest, SocketIsClosedToOtherUsersWithoutTheGroup) {
  const std::vector<std::string> nobody = AsNobody();
  if (nobody.empty()) GTEST_SKIP() << "setpriv not found: cannot run as another uid";
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to uid 65534";
  Daemon d(dir_.path(), {});
  ASSERT_TRUE(d.Start());
  CommandResult r = d.Memctl({"status"}, nobody);
  EXPECT_NE(r.exit_code, 0);
}

TEST_F(DaemonTest, ConfigFileEnvironmentAndFlagsLayer) {
  const std::string conf = dir_.path() + "/memvirtd.conf";
  {
    std::FILE* f = std::fopen(conf.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "# test\nconfig_version = 1\ngpu = %s:4G\nreserve = 1G\nhost-memory = 2G\n",
                 kGpu);
    std::fclose(f);
  }
  Daemon d(dir_.path(), {"--config=" + conf, "--host-memory=3G"}, {"MEMVIRTD_RESERVE=128M"});
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto s = d.StatusJson();
  ASSERT_TRUE(s.has_value());
  const auto& gpu = s->fields().at("gpus").list_value().values(0).struct_value();
  EXPECT_EQ(Field(gpu, "device_memory_bytes"), 4.0 * (1ull << 30));  // file
  EXPECT_EQ(Field(gpu, "reserve_bytes"), 128.0 * kMiB);              // env beats file
  EXPECT_EQ(Field(s->fields().at("host").struct_value(), "capacity_bytes"),
            3.0 * (1ull << 30));  // flag beats file

  TempDir other;
  const std::string bad = other.path() + "/bad.conf";
  {
    std::FILE* f = std::fopen(bad.c_str(), "w");
    std::fprintf(f, "config_version = 1\nno_such_flag = 1\n");
    std::fclose(f);
  }
  Daemon broken(other.path(), {"--config=" + bad});
  EXPECT_FALSE(broken.Start());
  EXPECT_EQ(broken.Wait(seconds(5)), std::optional<int>(2));
  EXPECT_THAT(broken.process().Stderr(), HasSubstr("unknown key no_such_flag"));
}

}  // namespace
}  // namespace memvirt::testing

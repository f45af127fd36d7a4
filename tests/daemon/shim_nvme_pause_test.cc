// A daemon that stops answering for a while (SIGSTOP, a stall, an overloaded node) while three
// shim processes hold data on its NVMe tier: the processes wait for it (Note [slow or gone] in
// shim/daemon_link/tier_channel.cc) and all finish with the checksum of an unlimited run.
// Built twice, the suite named by MEMVIRT_PAUSE_SUITE: shim_nvme_pause_test pauses 2.5 s with an
// 8 s client deadline; shim_nvme_long_pause_test (label slow) pauses 10 s with the default one.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/daemon/daemon_harness.h"

namespace memvirt::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kDeviceBytes = 64 * kMiB;
constexpr uint64_t kFootprint = 4 * kDeviceBytes;
constexpr int kIterations = 8;
constexpr int kProcesses = 3;

TEST(MEMVIRT_PAUSE_SUITE, ProcessesWaitForAPausedDaemonAndKeepTheirNvmeData) {
  TempDir dir;
  const std::vector<std::string> workload = {MEMSHIM_TRAIN_WORKLOAD, MEMSHIM_TEST_KERNELS,
                                             std::to_string(kFootprint),
                                             std::to_string(kIterations)};
  auto reference =
      Subprocess::Spawn(workload, dir.path() + "/reference", {"MEMSIM_DEVICE_MEMORY=2G"});
  ASSERT_EQ(reference->Wait(seconds(120)), std::optional<int>(0)) << reference->Stderr();
  const std::string expected = WorkloadChecksum(reference->Stdout());
  ASSERT_FALSE(expected.empty());

  // Each process has a 1x host tier of its own, so most of its data goes to NVMe.
  Daemon d(dir.path(), {"--reserve=0", "--restart_grace_ms=0", "--swap_dir=" + dir.path() + "/swap",
                        "--swap_size=2G"});
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  std::vector<std::string> env = {"LD_PRELOAD=" MEMSHIM_LIBRARY,
                                  "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
                                  "MEMSHIM_DAEMON_SOCKET=" + d.socket(),
                                  "MEMSHIM_LOG=info",
                                  "MEMSHIM_REPORT_INTERVAL_MS=50",
                                  "MEMSHIM_MIN_DEVICE_BUDGET=8M",
                                  "MEMSHIM_HOST_BUDGET=" + std::to_string(kDeviceBytes),
                                  "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"};
  if (MEMVIRT_TIER_DEADLINE_MS > 0) {
    env.push_back("MEMSHIM_TIER_DEADLINE_MS=" + std::to_string(MEMVIRT_TIER_DEADLINE_MS));
  }
  std::vector<std::unique_ptr<Subprocess>> processes;
  for (int i = 0; i < kProcesses; ++i) {
    // A simulated GPU of its own each (another UUID): no process waits for another's shrink.
    std::vector<std::string> own = env;
    own.push_back("MEMSIM_NODE=memvirt-pause-" + std::to_string(getpid()) + "-" +
                  std::to_string(i));
    processes.push_back(Subprocess::Spawn(workload, dir.path() + "/shim" + std::to_string(i), own));
  }
  // Each process has had data on NVMe, and all still run.
  std::vector<bool> spilled(kProcesses, false);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        if (!s.has_value()) return false;
        bool all = true;
        for (int i = 0; i < kProcesses; ++i) {
          const auto* entry = FindProcess(*s, processes[i]->pid());
          if (entry != nullptr && Field(FirstGpu(*entry), "nvme_bytes") > 0) spilled[i] = true;
          all = all && spilled[i];
        }
        return all;
      },
      seconds(60)))
      << processes[0]->Stderr();
  for (auto& p : processes) ASSERT_TRUE(p->Running()) << "finished before the pause";

  d.Kill(SIGSTOP);
  std::this_thread::sleep_for(milliseconds(MEMVIRT_PAUSE_MS));
  d.Kill(SIGCONT);

  for (auto& p : processes) {
    ASSERT_EQ(p->Wait(seconds(180)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
    EXPECT_EQ(WorkloadChecksum(p->Stdout()), expected) << p->Stderr();
    EXPECT_EQ(p->Stderr().find("lost the daemon's tier channel"), std::string::npos) << p->Stderr();
  }
}

}  // namespace
}  // namespace memvirt::testing

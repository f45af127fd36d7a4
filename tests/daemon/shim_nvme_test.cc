// The NVMe tier end to end: a shim process whose footprint is 4x the simulated device, with a
// host tier of 1x, under a memvirtd with swap files; checked with checksums and
// `memctl status --json`; the same on two devices sharing one host budget. Also: the tier socket
// refuses processes that are not registered clients and survives garbage.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "memvirt/tier_protocol.h"
#include "tests/daemon/daemon_harness.h"
#include "tests/daemon/tier_test_util.h"

namespace memvirt::testing {
namespace {

using std::chrono::seconds;

bool CreateFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  return f != nullptr && std::fclose(f) == 0;
}

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kDeviceBytes = 64 * kMiB;
constexpr uint64_t kFootprint = 4 * kDeviceBytes;
constexpr int kIterations = 6;

std::vector<std::string> WorkloadArgv() {
  return {MEMSHIM_TRAIN_WORKLOAD, MEMSHIM_TEST_KERNELS, std::to_string(kFootprint),
          std::to_string(kIterations)};
}

class ShimNvmeTest : public ::testing::Test {
 protected:
  std::vector<std::string> DaemonFlags(const std::string& swap_size) {
    return {"--reserve=0", "--restart_grace_ms=0", "--host_memory=" + std::to_string(kDeviceBytes),
            "--swap_dir=" + dir_.path() + "/swap", "--swap_size=" + swap_size};
  }
  std::unique_ptr<Subprocess> StartShimProcess(const Daemon& d) {
    return Subprocess::Spawn(
        WorkloadArgv(), dir_.path() + "/shim",
        {"LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
         "MEMSHIM_DAEMON_SOCKET=" + d.socket(), "MEMSHIM_LOG=info", "MEMSHIM_REPORT_INTERVAL_MS=50",
         "MEMSHIM_MIN_DEVICE_BUDGET=8M", "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
  }
  // multi_device_workload `argv` on two unconstrained simulated devices: its checksum, or empty
  // (a failure recorded) if it did not finish.
  std::string TwoDeviceReferenceChecksum(const std::vector<std::string>& argv,
                                         const std::string& name) {
    auto reference = Subprocess::Spawn(argv, dir_.path() + "/" + name,
                                       {"MEMSIM_DEVICE_MEMORY=2G", "MEMSIM_DEVICE_COUNT=2"});
    if (reference->Wait(seconds(120)) != std::optional<int>(0)) {
      ADD_FAILURE() << reference->Stderr();
      return "";
    }
    const std::string checksum = WorkloadChecksum(reference->Stdout());
    if (checksum.empty()) ADD_FAILURE() << reference->Stdout();
    return checksum;
  }
  // `argv` under the shim on two simulated devices of kDeviceBytes each, with daemon `d`.
  std::unique_ptr<Subprocess> StartTwoDeviceShimProcess(const std::vector<std::string>& argv,
                                                        const std::string& name, const Daemon& d) {
    return Subprocess::Spawn(
        argv, dir_.path() + "/" + name,
        {"LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSIM_DEVICE_COUNT=2",
         "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
         "MEMSHIM_DAEMON_SOCKET=" + d.socket(), "MEMSHIM_LOG=info", "MEMSHIM_REPORT_INTERVAL_MS=50",
         "MEMSHIM_MIN_DEVICE_BUDGET=8M", "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
  }
  TempDir dir_;
};

TEST_F(ShimNvmeTest, FourTimesTheDeviceWithAOneTimesHostTierRunsThroughNvme) {
  auto reference =
      Subprocess::Spawn(WorkloadArgv(), dir_.path() + "/reference", {"MEMSIM_DEVICE_MEMORY=2G"});
  ASSERT_EQ(reference->Wait(seconds(120)), std::optional<int>(0)) << reference->Stderr();
  const std::string expected = WorkloadChecksum(reference->Stdout());
  ASSERT_FALSE(expected.empty());

  Daemon d(dir_.path(), DaemonFlags("1G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartShimProcess(d);
  double max_nvme = 0, max_host = 0, nvme_written = 0, nvme_read = 0, host_budget = 0;
  while (p->Running()) {
    auto s = d.StatusJson();
    ASSERT_TRUE(s.has_value()) << d.process().Stderr();
    if (const auto* entry = FindProcess(*s, p->pid())) {
      const auto& g = FirstGpu(*entry);
      host_budget = Field(*entry, "host_budget_bytes");
      max_nvme = std::max(max_nvme, Field(g, "nvme_bytes"));
      max_host = std::max(max_host, Field(g, "host_bytes"));
      nvme_written = std::max(nvme_written, Field(g, "nvme_write_bytes"));
      nvme_read = std::max(nvme_read, Field(g, "nvme_read_bytes"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(p->Wait(seconds(1)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
  EXPECT_EQ(WorkloadChecksum(p->Stdout()), expected) << p->Stderr();
  EXPECT_EQ(host_budget, double(kDeviceBytes));
  EXPECT_LE(max_host, double(kDeviceBytes));
  EXPECT_GT(max_nvme, 0) << p->Stderr();
  EXPECT_GT(nvme_written, 0);
  EXPECT_GT(nvme_read, 0);
  std::cout << "peak NVMe-resident " << max_nvme / kMiB << " MiB, written " << nvme_written / kMiB
            << " MiB, read " << nvme_read / kMiB << " MiB, peak host tier " << max_host / kMiB
            << " MiB\n";
  // The process's swap extents are freed when it exits.
  EXPECT_TRUE(WaitUntil(
      [&] { return d.process().Stderr().find("bytes of swap freed") != std::string::npos; },
      seconds(10)))
      << d.process().Stderr();
}

// Note [shared host budget] (shim/core/host_ledger.h), Note [several devices]
// (shim/daemon_link/daemon_control_plane.cc): one process on two simulated devices, 4x each
// device's memory on each, under a daemon that gives the process a 1x host budget. The two
// devices' cores share that one budget (their host bytes together stay within it, not 2x), and
// both spill to NVMe through tier channels of their own; the result is the unconstrained run's.
TEST_F(ShimNvmeTest, TwoDevicesShareOneHostBudgetAndBothSpillToNvme) {
  const std::vector<std::string> argv = {MEMSHIM_MULTI_DEVICE_WORKLOAD, MEMSHIM_TEST_KERNELS,
                                         std::to_string(kFootprint), "4"};
  const std::string expected = TwoDeviceReferenceChecksum(argv, "multi.reference");
  ASSERT_FALSE(expected.empty());

  Daemon d(dir_.path(), DaemonFlags("2G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartTwoDeviceShimProcess(argv, "multi.shim", d);
  double max_host_sum = 0, host_budget = 0;
  std::map<std::string, double> max_nvme;
  while (p->Running()) {
    auto s = d.StatusJson();
    ASSERT_TRUE(s.has_value()) << d.process().Stderr();
    if (const auto* entry = FindProcess(*s, p->pid())) {
      host_budget = Field(*entry, "host_budget_bytes");
      double host_sum = 0;
      for (const auto& v : entry->fields().at("gpus").list_value().values()) {
        const auto& g = v.struct_value();
        const std::string uuid = g.fields().at("uuid").string_value();
        host_sum += Field(g, "host_bytes");
        max_nvme[uuid] = std::max(max_nvme[uuid], Field(g, "nvme_bytes"));
      }
      max_host_sum = std::max(max_host_sum, host_sum);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(p->Wait(seconds(1)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
  EXPECT_EQ(WorkloadChecksum(p->Stdout()), expected) << p->Stderr();
  EXPECT_EQ(host_budget, double(kDeviceBytes));
  EXPECT_GT(max_host_sum, 0);
  EXPECT_LE(max_host_sum, double(kDeviceBytes)) << "the devices' host tiers exceed the budget";
  ASSERT_EQ(max_nvme.size(), 2u) << "the process was never listed on two GPUs";
  for (const auto& [uuid, nvme] : max_nvme) {
    EXPECT_GT(nvme, 0) << uuid << " never spilled to NVMe\n" << p->Stderr();
  }
  size_t tiers = 0;
  for (size_t at = p->Stderr().find("NVMe tier for GPU-"); at != std::string::npos;
       at = p->Stderr().find("NVMe tier for GPU-", at + 1)) {
    ++tiers;
  }
  EXPECT_EQ(tiers, 2u) << p->Stderr();
  std::cout << "peak host tier of both devices " << max_host_sum / kMiB << " MiB; peak NVMe "
            << max_nvme.begin()->second / kMiB << " and " << max_nvme.rbegin()->second / kMiB
            << " MiB\n";
}

// Note [host slots of other cores] (shim/core/host_peers.h): the same process, but device 1
// allocates and initializes all of its 4x first, so its data holds the whole 1x host budget
// when device 0 starts, and device 0 has no host chunk of its own to demote for its first
// page-out. Device 0's core asks device 1's core to demote some of its host chunks to NVMe
// (its exit summary counts the requests) and the run ends with the unconstrained checksum;
// without the request the first page-out on device 0 fails with CUDA_ERROR_OUT_OF_MEMORY.
TEST_F(ShimNvmeTest, ADeviceGetsHostSlotsThatTheOtherDeviceHolds) {
  const std::vector<std::string> argv = {MEMSHIM_MULTI_DEVICE_WORKLOAD, MEMSHIM_TEST_KERNELS,
                                         std::to_string(kFootprint), "1", "device_by_device"};
  const std::string expected = TwoDeviceReferenceChecksum(argv, "ordered.reference");
  ASSERT_FALSE(expected.empty());

  Daemon d(dir_.path(), DaemonFlags("2G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartTwoDeviceShimProcess(argv, "ordered.shim", d);
  ASSERT_EQ(p->Wait(seconds(300)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
  EXPECT_EQ(WorkloadChecksum(p->Stdout()), expected) << p->Stderr();
  // "device 0: ... host slots asked of other cores N times (M MiB given back)"
  const std::string err = p->Stderr();
  const size_t line = err.find("device 0: device chunks peak");
  ASSERT_NE(line, std::string::npos) << err;
  const std::string key = "host slots asked of other cores ";
  const size_t at = err.find(key, line);
  ASSERT_NE(at, std::string::npos) << err;
  unsigned long long asked = 0, given_mib = 0;
  ASSERT_EQ(std::sscanf(err.c_str() + at + key.size(), "%llu times (%llu MiB given back)", &asked,
                        &given_mib),
            2)
      << err;
  EXPECT_GT(asked, 0u) << err;
  EXPECT_GT(given_mib, 0u) << err;
}

// The number after `key` in `out` ("key value"), or -1.
long long NumberAfter(const std::string& out, const std::string& key) {
  const size_t at = out.find(key + " ");
  if (at == std::string::npos) return -1;
  return std::atoll(out.c_str() + at + key.size() + 1);
}

// Note [shared admission] (shim/core/overflow_ledger.h): one process on two simulated devices
// allocates 2 MiB blocks alternately, each written by a copy, under a daemon with a 64 MiB host
// budget and 128 MiB of swap. The devices together are admitted exactly their device budgets +
// the host budget + the NVMe capacity less a chunk per staging buffer of each core (the cores'
// log lines give the numbers); the allocation
// beyond is refused at cuMemAlloc on both devices, no admitted block's copy fails, and every
// admitted block keeps its bytes through the host and NVMe tiers.
TEST_F(ShimNvmeTest, TwoDevicesAreRefusedAtAllocationBeyondDevicesHostAndNvme) {
  constexpr uint64_t kBlock = 2 * kMiB, kChunk = 2 * kMiB;
  Daemon d(dir_.path(), DaemonFlags("128M"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartTwoDeviceShimProcess({MEMSHIM_ADMISSION_LIMIT, std::to_string(kBlock), "1000"},
                                     "admission", d);
  ASSERT_EQ(p->Wait(seconds(120)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
  const std::string out = p->Stdout(), err = p->Stderr();
  // "virtual device memory: D MiB device budget, H MiB host tier, S MiB spill tier, ..."
  uint64_t admissible_mib = 0;
  int cores = 0;
  unsigned long long host_mib = 0, spill_mib = 0;
  const std::string key = "virtual device memory: ";
  for (size_t at = err.find(key); at != std::string::npos; at = err.find(key, at + 1)) {
    unsigned long long device = 0, host = 0, spill = 0;
    ASSERT_EQ(std::sscanf(err.c_str() + at + key.size(),
                          "%llu MiB device budget, %llu MiB host tier, %llu MiB spill tier",
                          &device, &host, &spill),
              3)
        << err;
    admissible_mib += device;
    host_mib = host;
    spill_mib = spill;
    ++cores;
  }
  ASSERT_EQ(cores, 2) << err;
  // "NVMe tier for GPU-...: N MiB of swap on the node, K staging buffers": each core holds back
  // K chunks of the swap to move chunks through a full tier.
  uint64_t reserve_mib = 0;
  const std::string tier = "MiB of swap on the node, ";
  for (size_t at = err.find(tier); at != std::string::npos; at = err.find(tier, at + 1)) {
    reserve_mib += std::strtoull(err.c_str() + at + tier.size(), nullptr, 10) * (kChunk / kMiB);
  }
  EXPECT_GT(reserve_mib, 0u) << err;
  EXPECT_EQ(host_mib, kDeviceBytes / kMiB);
  EXPECT_GT(spill_mib, 0u) << err;
  // One host budget and one swap for both devices: more than the devices and host hold, so
  // the admitted blocks beyond them live in the NVMe tier.
  admissible_mib += host_mib + spill_mib - reserve_mib;
  const long long admitted = static_cast<long long>(admissible_mib * kMiB / kBlock);
  constexpr long long kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
  EXPECT_EQ(NumberAfter(out, "refused_at"), admitted) << out << err;
  EXPECT_EQ(NumberAfter(out, "result"), kOutOfMemory) << out;
  EXPECT_EQ(NumberAfter(out, "other_device_result"), kOutOfMemory) << out;
  EXPECT_EQ(NumberAfter(out, "blocks"), admitted) << out;
  EXPECT_EQ(NumberAfter(out, "mismatches"), 0) << out;
}

// Note [hidden reach] (shim/core/shim_core_hidden_reach.cc): blocks written by copies are pushed
// to the NVMe tier (a 64 MiB device, a 64 MiB host tier, 224 MiB of data), and only then is a
// pointer array naming them written; kernels reach them only through it. Their launches bring
// the spilled blocks back (not all spilled data, which device and host cannot hold at once), no
// illegal address, every checksum right; the blocks stay out of the NVMe tier afterwards while
// the kernels refill them under pressure. One test per way the array is written or read
// (tests/shim/hidden_pointers.cc).
class ShimNvmeHiddenReachTest : public ShimNvmeTest {
 protected:
  void ExpectSpilledBlocksReachedThroughTheArray(const std::string& mode,
                                                 const std::string& hidden_reach = "") {
    Daemon d(dir_.path(), DaemonFlags("1G"));
    ASSERT_TRUE(d.Start()) << d.process().Stderr();
    auto p = Subprocess::Spawn(
        {MEMSHIM_HIDDEN_POINTERS, MEMSHIM_TEST_KERNELS, std::to_string(kDeviceBytes), mode,
         "spill"},
        dir_.path() + "/hidden-" + mode,
        {"LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
         "MEMSHIM_DAEMON_SOCKET=" + d.socket(), "MEMSHIM_LOG=info", "MEMSHIM_REPORT_INTERVAL_MS=50",
         "MEMSHIM_MIN_DEVICE_BUDGET=8M", "MEMSHIM_HIDDEN_REACH=" + hidden_reach,
         "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
    double max_nvme = 0;
    while (p->Running()) {
      auto s = d.StatusJson();
      ASSERT_TRUE(s.has_value()) << d.process().Stderr();
      if (const auto* entry = FindProcess(*s, p->pid())) {
        max_nvme = std::max(max_nvme, Field(FirstGpu(*entry), "nvme_bytes"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(p->Wait(seconds(1)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
    EXPECT_NE(p->Stdout().find("mismatches 0"), std::string::npos) << p->Stdout();
    EXPECT_GT(max_nvme, 0) << p->Stderr();
  }
};

// A pointer array written by a small host-to-device copy (recognized before too: the launch then
// tried to bring back all spilled data and failed with CUDA_ERROR_OUT_OF_MEMORY).
TEST_F(ShimNvmeHiddenReachTest,
       SpilledBlocksReachedOnlyThroughAPointerArrayComeBackBeforeTheKernel) {
  ExpectSpilledBlocksReachedThroughTheArray("array");
}

// Arrays the shim did not recognize before (the kernels then read unmapped addresses:
// CUDA_ERROR_ILLEGAL_ADDRESS), and graph launches, which were not fenced.
TEST_F(ShimNvmeHiddenReachTest, ArrayWrittenByALargeCopy) {
  ExpectSpilledBlocksReachedThroughTheArray("large");
}

TEST_F(ShimNvmeHiddenReachTest, ArrayWrittenByA2DCopy) {
  ExpectSpilledBlocksReachedThroughTheArray("copy2d");
}

TEST_F(ShimNvmeHiddenReachTest, ArrayCopiedByAKernel) {
  ExpectSpilledBlocksReachedThroughTheArray("device");
}

TEST_F(ShimNvmeHiddenReachTest, ArrayOutsideTheReservationAsAModuleVariable) {
  ExpectSpilledBlocksReachedThroughTheArray("global");
}

TEST_F(ShimNvmeHiddenReachTest, GraphWhoseKernelReadsTheArray) {
  ExpectSpilledBlocksReachedThroughTheArray("graph");
}

// Note [hidden reach everywhere]: an array a kernel builds from addresses it was given as plain
// arguments is not recognized (without the setting this test fails: the blocks are spilled
// while the kernels reach them unnamed); with MEMSHIM_HIDDEN_REACH=all the blocks named by the
// building kernel come back with it and are never demoted again.
TEST_F(ShimNvmeHiddenReachTest, ArrayBuiltByAKernelFromPlainArgumentsWithHiddenReachAll) {
  ExpectSpilledBlocksReachedThroughTheArray("args", "all");
}

// Batched copies, 3D peer copies and stream memory operations (tests/shim/passthru_ops.cc) on
// buffers that the host tier could not hold (a footprint 4x the device, a 1x host tier): when
// the operation is enqueued its buffers are on NVMe, unmapped. An operation the shim does not
// track reaches the driver with unmapped ranges (CUDA_ERROR_INVALID_VALUE, or a fault when it
// runs); a tracked one has them brought back first and recorded as used by its stream, and its
// bytes match the unconstrained run's.
class ShimNvmePassthruTest : public ShimNvmeTest,
                             public ::testing::WithParamInterface<const char*> {};

TEST_P(ShimNvmePassthruTest, OperationOnSpilledBuffersMatchesUnconstrainedRun) {
  const std::vector<std::string> argv = {MEMSHIM_PASSTHRU_OPS, GetParam(),
                                         std::to_string(kFootprint)};
  auto reference =
      Subprocess::Spawn(argv, dir_.path() + "/passthru.reference", {"MEMSIM_DEVICE_MEMORY=2G"});
  ASSERT_EQ(reference->Wait(seconds(60)), std::optional<int>(0)) << reference->Stderr();
  ASSERT_NE(reference->Stdout().find("result 0\n"), std::string::npos) << reference->Stdout();
  Daemon d(dir_.path(), DaemonFlags("1G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = Subprocess::Spawn(
      argv, dir_.path() + "/passthru.shim",
      {"LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
       "MEMSHIM_DAEMON_SOCKET=" + d.socket(), "MEMSHIM_LOG=info", "MEMSHIM_MIN_DEVICE_BUDGET=8M",
       "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
  ASSERT_EQ(p->Wait(seconds(60)), std::optional<int>(0)) << p->Stdout() << p->Stderr();
  EXPECT_EQ(p->Stdout(), reference->Stdout()) << p->Stderr();
  EXPECT_NE(p->Stderr().find("NVMe tier for GPU-"), std::string::npos) << p->Stderr();
}

INSTANTIATE_TEST_SUITE_P(Operations, ShimNvmePassthruTest,
                         ::testing::Values("batch", "peer3d", "value", "batchmemop"));

// Note [what a restart keeps] (docs/nvme.md): a daemon restart keeps no NVMe contents. A process
// whose data was on NVMe then fails its next access to that data with a CUDA error; it never
// computes on wrong data.
TEST_F(ShimNvmeTest, KilledDaemonFailsAccessesToLostDataInsteadOfCorruptingThem) {
  auto reference =
      Subprocess::Spawn(WorkloadArgv(), dir_.path() + "/reference", {"MEMSIM_DEVICE_MEMORY=2G"});
  ASSERT_EQ(reference->Wait(seconds(120)), std::optional<int>(0)) << reference->Stderr();
  const std::string expected = WorkloadChecksum(reference->Stdout());
  Daemon d(dir_.path(), DaemonFlags("1G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartShimProcess(d);
  ASSERT_TRUE(WaitUntil(
      [&] {
        auto s = d.StatusJson();
        const auto* entry = s ? FindProcess(*s, p->pid()) : nullptr;
        return entry != nullptr && Field(FirstGpu(*entry), "nvme_bytes") > 0;
      },
      seconds(60)))
      << p->Stderr();
  d.Kill(SIGKILL);
  const std::optional<int> code = p->Wait(seconds(120));
  ASSERT_TRUE(code.has_value());
  EXPECT_LT(*code, 128) << "the workload crashed: " << p->Stderr();
  std::cout << "workload exit code after the daemon was killed: " << *code << "\n";
  if (*code == 0) {
    EXPECT_EQ(WorkloadChecksum(p->Stdout()), expected);  // finished before it needed lost data
  } else {
    EXPECT_NE(p->Stderr().find("spill tier"), std::string::npos) << p->Stderr();
    EXPECT_EQ(WorkloadChecksum(p->Stdout()), "");
  }
}

// Issue 14 (found by shim_chaos_test): after the daemon is killed and restarted, a process keeps
// spilling to the new daemon's NVMe tier (Note [reopening] in shim/daemon_link/tier_channel.h).
// Phase B alone needs NVMe (160 MiB beyond a 64 MiB device and a 64 MiB host tier), so it
// completes only if the tier channel was reopened; what the old daemon held fails cleanly.
TEST_F(ShimNvmeTest, AfterADaemonRestartTheProcessSpillsToNvmeAgain) {
  constexpr int kBuffers = 20;  // of 8 MiB: 160 MiB per phase
  const std::string go = dir_.path() + "/go";
  Daemon d(dir_.path(), DaemonFlags("1G"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = Subprocess::Spawn(
      {MEMVIRT_NVME_RESTART_WORKLOAD, std::to_string(kBuffers), go}, dir_.path() + "/restart",
      {"LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDeviceBytes),
       "MEMSHIM_DAEMON_SOCKET=" + d.socket(), "MEMSHIM_LOG=info", "MEMSHIM_REPORT_INTERVAL_MS=50",
       "MEMSHIM_MIN_DEVICE_BUDGET=8M", "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0"});
  auto nvme_bytes = [&] {
    auto s = d.StatusJson();
    const auto* entry = s ? FindProcess(*s, p->pid()) : nullptr;
    return entry != nullptr ? Field(FirstGpu(*entry), "nvme_bytes") : -1.0;
  };
  ASSERT_TRUE(
      WaitUntil([&] { return p->Stdout().find("stored A") != std::string::npos; }, seconds(120)))
      << p->Stderr();
  ASSERT_TRUE(WaitUntil([&] { return nvme_bytes() > 0; }, seconds(10))) << p->Stderr();

  d.Kill(SIGKILL);
  ASSERT_EQ(d.Wait(seconds(5)), std::optional<int>(128 + SIGKILL));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  ASSERT_TRUE(WaitUntil([&] { return nvme_bytes() >= 0; }, seconds(10)))  // re-registered
      << p->Stderr();
  ASSERT_TRUE(CreateFile(go));
  const std::optional<int> code = p->Wait(seconds(180));
  ASSERT_TRUE(code.has_value());
  std::cout << p->Stdout();
  EXPECT_EQ(*code, 0) << p->Stderr();
  EXPECT_NE(p->Stdout().find("b ok=" + std::to_string(kBuffers) + " wrong=0 failed=0"),
            std::string::npos)
      << p->Stderr();
  EXPECT_NE(p->Stdout().find("wrong=0 lost="), std::string::npos) << p->Stderr();
  EXPECT_EQ(p->Stdout().find("lost=0"), std::string::npos)  // phase A had chunks on NVMe
      << p->Stderr();
  EXPECT_NE(p->Stderr().find("reopened the daemon's tier channel"), std::string::npos)
      << p->Stderr();
  EXPECT_NE(d.process().Stderr().find("tier connection from pid " + std::to_string(p->pid())),
            std::string::npos);
}

TEST_F(ShimNvmeTest, TooLittleSwapFailsTheAllocationWithOutOfMemory) {
  Daemon d(dir_.path(), DaemonFlags("16M"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  auto p = StartShimProcess(d);
  const std::optional<int> code = p->Wait(seconds(120));
  ASSERT_TRUE(code.has_value());
  EXPECT_NE(*code, 0);
  EXPECT_LT(*code, 128) << "the workload crashed: " << p->Stderr();
  EXPECT_NE(p->Stderr().find("failed: 2"), std::string::npos) << p->Stderr();  // OUT_OF_MEMORY
}

// Sends a Hello with a staging memfd; returns the reply status (or -1).
int HelloStatus(const std::string& socket_path) {
  const int fd = tier::ConnectUnixSocket(socket_path);
  tier::HelloReply reply;
  const bool ok = fd >= 0 && SendHello(fd, 1, &reply);
  if (fd >= 0) close(fd);
  return ok ? static_cast<int>(reply.status) : -1;
}

TEST_F(ShimNvmeTest, TierSocketRefusesUnregisteredProcessesAndSurvivesGarbage) {
  Daemon d(dir_.path(), DaemonFlags("64M"));
  ASSERT_TRUE(d.Start()) << d.process().Stderr();
  const std::string tier_socket = d.socket() + tier::kTierSocketSuffix;
  // This test process never registered: no tenant, no access to anyone's slabs.
  EXPECT_EQ(HelloStatus(tier_socket), static_cast<int>(tier::Status::kDenied));
  // Garbage instead of a Hello, a Hello without a descriptor, and an early close.
  for (const std::string& junk :
       {std::string(16, '\xff'), std::string("MVT1\1\0\0\0", 8), std::string(4096, 'x')}) {
    const int fd = tier::ConnectUnixSocket(tier_socket);
    ASSERT_GE(fd, 0);
    (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  EXPECT_EQ(HelloStatus(tier_socket), static_cast<int>(tier::Status::kDenied));
  EXPECT_TRUE(d.process().Running());
  EXPECT_EQ(d.Memctl({"health"}).exit_code, 0);
}

}  // namespace
}  // namespace memvirt::testing

// Runs the integration programs on the simulated GPU, with and without
// LD_PRELOAD=libmemshim.so, and compares what they compute.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/shim/run_program.h"

namespace memvirt::testing {
namespace {

const std::string kShim = MEMSHIM_LIBRARY;
const std::string kSimDir = MEMSIM_LIBRARY_DIR;
const std::string kKernels = MEMSHIM_TEST_KERNELS;
constexpr uint64_t kDevice = 64ull << 20;
constexpr int kCudaErrorInvalidValue = 1;  // CUDA_ERROR_INVALID_VALUE

std::vector<std::string> SimEnv(uint64_t device_bytes) {
  return {"LD_LIBRARY_PATH=" + kSimDir, "MEMSIM_DEVICE_MEMORY=" + std::to_string(device_bytes),
          "LD_PRELOAD=", "MEMSHIM_DISABLE=", "MEMSIM_NODE="};
}

std::vector<std::string> ShimEnv(uint64_t device_bytes) {
  std::vector<std::string> env = SimEnv(device_bytes);
  env.push_back("LD_PRELOAD=" + kShim);
  env.push_back("MEMSHIM_HOST_BUDGET=1G");
  env.push_back("MEMSHIM_DAEMON_SOCKET=/nonexistent/memvirtd.sock");
  return env;
}

TEST(TrainingWorkloadTest, ThreeTimesDeviceMemoryMatchesUnconstrainedRun) {
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult reference =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const std::string expected = Field(reference.out, "checksum");
  ASSERT_EQ(expected.size(), 16u);

  const ProgramResult shim =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint}, ShimEnv(kDevice));
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), expected);
  // The peak footprint really exceeds the simulated device 3x.
  EXPECT_GE(std::stoull(Field(shim.out, "layer_bytes")) * 32, 3 * kDevice - (1 << 20));
}

TEST(TrainingWorkloadTest, ProgramUsingTheVmmApiItselfMatchesUnconstrainedRun) {
  // Part of its memory comes from its own cuMemCreate/cuMemMap (as expandable segments do):
  // the shim pages it with the rest (Note [application VMM]).
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult reference =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const ProgramResult plain_vmm =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint, "3", "vmm"}, SimEnv(1ull << 30));
  ASSERT_EQ(plain_vmm.exit_code, 0) << plain_vmm.out;
  EXPECT_EQ(Field(plain_vmm.out, "checksum"), Field(reference.out, "checksum"));
  const ProgramResult shim =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint, "3", "vmm"}, ShimEnv(kDevice));
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), Field(reference.out, "checksum"));
}

// Note [application VMM]: memory the program creates and maps itself, 3x the device, paged by
// the shim: every handle's checksum (kernels and copies over it, a copy across two mappings),
// unmap and release in both orders, a refused sub-range unmap, new mappings in the freed space.
TEST(AppVmmTest, ProgramMappingThreeTimesTheDeviceItselfKeepsEveryByte) {
  const std::vector<std::string> args = {MEMSHIM_APP_VMM, kKernels, std::to_string(kDevice), "3"};
  const ProgramResult reference = RunProgram(args, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  EXPECT_NE(reference.out.find("0 failed"), std::string::npos) << reference.out;

  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSHIM_LOG=info");
  const ProgramResult shim = RunProgram(args, env, /*with_stderr=*/true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(shim.out.find("FAIL"), std::string::npos) << shim.out;
  EXPECT_NE(shim.out.find("0 failed"), std::string::npos) << shim.out;
  // Documented answers: no sub-range unmap (CUDA_ERROR_INVALID_VALUE); an exported handle is
  // pinned in driver memory (Note [exported handles]), so export works.
  EXPECT_EQ(Field(shim.out, "partial_unmap"), std::to_string(kCudaErrorInvalidValue));
  EXPECT_EQ(Field(shim.out, "export"), "0");
  EXPECT_NE(shim.out.find("bytes pinned in driver memory"), std::string::npos) << shim.out;
  EXPECT_NE(shim.out.find("the shim pages it like cuMemAlloc memory"), std::string::npos);
  // It was paged: chunks went to the host tier and came back (the exit summary's
  // "N page-ins, M evictions").
  const size_t page_ins = shim.out.find(" page-ins, ");
  ASSERT_NE(page_ins, std::string::npos) << shim.out;
  const size_t number = shim.out.find_last_of(' ', page_ins - 1) + 1;
  EXPECT_GT(std::stoull(shim.out.substr(number, page_ins - number)), 0u) << shim.out;
  EXPECT_GT(std::stoull(shim.out.substr(page_ins + std::strlen(" page-ins, "))), 0u) << shim.out;

  const ProgramResult plain = RunProgram(args, SimEnv(kDevice));
  EXPECT_EQ(plain.exit_code, 3) << plain.out;  // out of memory without the shim
}

TEST(TrainingWorkloadTest, FailsWithOutOfMemoryWithoutTheShim) {
  const ProgramResult plain =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, std::to_string(3 * kDevice)}, SimEnv(kDevice));
  EXPECT_EQ(plain.exit_code, 3) << plain.out;
  EXPECT_NE(plain.out.find("OOM"), std::string::npos);
}

// Note [host tier preconditions]: on a system without host-NUMA VMM support
// the host tier is off from the start, cuMemGetInfo reports only the device
// budget, the log says why once, and the shim is a pass-through with a
// budget: a footprint beyond the device fails with a clean
// CUDA_ERROR_OUT_OF_MEMORY, one within it computes what the plain driver does.
TEST(TrainingWorkloadTest, WithoutHostNumaSupportTheDeviceBudgetIsTheLimit) {
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSIM_HOST_NUMA=0");
  const std::string beyond = std::to_string(3 * kDevice);
  const ProgramResult oom = RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, beyond}, env, true);
  EXPECT_EQ(oom.exit_code, 3) << oom.out;
  EXPECT_NE(oom.out.find("host tier off: the device reports no host-NUMA"), std::string::npos)
      << oom.out;

  const std::string within = std::to_string(kDevice / 2);
  const ProgramResult reference =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, within}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const ProgramResult shim = RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, within}, env, true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), Field(reference.out, "checksum"));
  EXPECT_LE(std::stoull(Field(shim.out, "reported_total")), kDevice);
  size_t logged = 0;
  for (size_t at = shim.out.find("host tier off"); at != std::string::npos;
       at = shim.out.find("host tier off", at + 1)) {
    ++logged;
  }
  EXPECT_EQ(logged, 1u) << shim.out;
}

TEST(TrainingWorkloadTest, DisabledShimIsPassThrough) {
  const std::string footprint = std::to_string(kDevice / 2);
  const ProgramResult reference =
      RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint}, SimEnv(kDevice));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSHIM_DISABLE=1");
  const ProgramResult disabled = RunProgram({MEMSHIM_TRAIN_WORKLOAD, kKernels, footprint}, env);
  ASSERT_EQ(disabled.exit_code, 0) << disabled.out;
  EXPECT_EQ(Field(disabled.out, "checksum"), Field(reference.out, "checksum"));
  // Pass-through reports the simulated device's real capacity.
  EXPECT_EQ(Field(disabled.out, "reported_total"), std::to_string(kDevice));
}

// Note [one core per device] (shim_core.h): one process oversubscribes two
// simulated devices 3x each at once, with kernels, memsets and copies on
// both and peer copies between them. Each device gets its own core: the
// result is the unconstrained run's, every kernel of a device reaches only
// mappings its device may access (the sim faults the context otherwise), and
// each device's physical chunks stay within that device's own budget (the
// shim's exit summary, Note [exit summary] in runtime.cc).
TEST(MultiDeviceWorkloadTest, TwoDevicesEachAtThreeTimesTheirMemoryMatchUnconstrainedRun) {
  const std::string footprint = std::to_string(3 * kDevice);
  std::vector<std::string> plain = SimEnv(1ull << 30);
  plain.push_back("MEMSIM_DEVICE_COUNT=2");
  const ProgramResult reference =
      RunProgram({MEMSHIM_MULTI_DEVICE_WORKLOAD, kKernels, footprint}, plain);
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const std::string expected = Field(reference.out, "checksum");
  ASSERT_EQ(expected.size(), 16u);

  std::vector<std::string> small = SimEnv(kDevice);
  small.push_back("MEMSIM_DEVICE_COUNT=2");
  const ProgramResult oom = RunProgram({MEMSHIM_MULTI_DEVICE_WORKLOAD, kKernels, footprint}, small);
  EXPECT_EQ(oom.exit_code, 3) << oom.out;

  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSIM_DEVICE_COUNT=2");
  env.push_back("MEMSHIM_LOG=info");
  const ProgramResult shim =
      RunProgram({MEMSHIM_MULTI_DEVICE_WORKLOAD, kKernels, footprint}, env, true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), expected);
  EXPECT_GE(std::stoull(Field(shim.out, "peak_bytes_per_device")), 3 * kDevice - (1 << 20));
  for (int device = 0; device < 2; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    // "device D: device chunks peak P of budget L, ..."
    const std::string key = "device " + std::to_string(device) + ": device chunks peak ";
    const size_t at = shim.out.find(key);
    ASSERT_NE(at, std::string::npos) << shim.out;
    unsigned peak = 0, budget = 0;
    unsigned long long page_ins = 0;
    ASSERT_EQ(std::sscanf(shim.out.c_str() + at + key.size(), "%u of budget %u, %llu page-ins",
                          &peak, &budget, &page_ins),
              3);
    EXPECT_GT(peak, 0u);
    EXPECT_LE(peak, budget);
    EXPECT_LE(static_cast<uint64_t>(budget) << 21, kDevice);  // the device's own budget
    EXPECT_GT(page_ins, 0u);  // oversubscribed: data came back from the host tier
    // cuMemGetInfo answers for the current context's device: its own device
    // budget + its host tier (MEMSHIM_HOST_BUDGET=1G, 512 chunks).
    const std::string line = "device " + std::to_string(device) + " reported_total ";
    const size_t reported_at = shim.out.find(line);
    ASSERT_NE(reported_at, std::string::npos) << shim.out;
    EXPECT_EQ(std::stoull(shim.out.substr(reported_at + line.size())),
              (static_cast<uint64_t>(budget) + 512) << 21);
  }
}

// Note [shared admission] (shim/core/overflow_ledger.h): one process allocates 2 MiB blocks
// alternately on two simulated devices, each with a 16 MiB device budget, sharing one 32 MiB
// host budget. Each device's core alone would admit 48 MiB; together the process holds 64 MiB.
// The allocation that crosses that line fails with CUDA_ERROR_OUT_OF_MEMORY at cuMemAlloc (on
// both devices), not as a failed copy into a block that was admitted, and every admitted block
// reads back what was written.
TEST(AdmissionTest, TwoDevicesSharingAHostBudgetAreRefusedAtAllocationBeyondIt) {
  constexpr uint64_t kBlock = 2ull << 20;
  constexpr uint64_t kDeviceBudget = 16ull << 20, kHostBudget = 32ull << 20;
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSIM_DEVICE_COUNT=2");
  env.push_back("MEMSHIM_DEVICE_BUDGET=" + std::to_string(kDeviceBudget));
  for (std::string& e : env) {  // instead of ShimEnv's 1 GiB
    if (e.rfind("MEMSHIM_HOST_BUDGET=", 0) == 0)
      e = "MEMSHIM_HOST_BUDGET=" + std::to_string(kHostBudget);
  }
  env.push_back("MEMSHIM_LOG=info");
  const ProgramResult r =
      RunProgram({MEMSHIM_ADMISSION_LIMIT, std::to_string(kBlock), "200"}, env, true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  constexpr int kCudaErrorOutOfMemory = 2;
  const uint64_t admitted = (2 * kDeviceBudget + kHostBudget) / kBlock;
  EXPECT_EQ(Field(r.out, "refused_at"), std::to_string(admitted)) << r.out;
  EXPECT_EQ(Field(r.out, "result"), std::to_string(kCudaErrorOutOfMemory)) << r.out;
  EXPECT_EQ(Field(r.out, "other_device_result"), std::to_string(kCudaErrorOutOfMemory)) << r.out;
  EXPECT_EQ(Field(r.out, "blocks"), std::to_string(admitted)) << r.out;
  EXPECT_EQ(Field(r.out, "mismatches"), "0") << r.out;
  // cuMemGetInfo: each device's virtual capacity, of which nothing is free for the process.
  EXPECT_EQ(Field(r.out, "reported_free"), "0") << r.out;
  EXPECT_EQ(Field(r.out, "reported_total"), std::to_string(kDeviceBudget + kHostBudget)) << r.out;
}

// Note [frees of other cores] and Note [host slots of other cores] (shim/core/host_peers.h),
// without a spill tier: two devices with 16 MiB device budgets share a 32 MiB host budget.
// Device 1 writes 24 blocks of 2 MiB (8 on its device, 16 filling the host budget) and frees the
// last 4 it wrote; device 0 then writes 12 (4 beyond its device budget). What both commit beyond
// their device budgets is then exactly the host budget: device 0's allocations are admitted once
// device 1's frees are settled (they may still wait for their copies when freed, and device 1
// makes no further call), and device 0's first page-out finds device 1's data in every host slot:
// device 1's core moves host chunks into its freed device memory and gives their slots back.
// Every block reads back what was written.
TEST(AdmissionTest, ADeviceGetsWhatTheOtherDeviceFreedAndTheHostSlotsItHolds) {
  constexpr uint64_t kBlock = 2ull << 20;
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSIM_DEVICE_COUNT=2");
  env.push_back("MEMSHIM_DEVICE_BUDGET=" + std::to_string(16ull << 20));
  for (std::string& e : env) {  // instead of ShimEnv's 1 GiB
    if (e.rfind("MEMSHIM_HOST_BUDGET=", 0) == 0) {
      e = "MEMSHIM_HOST_BUDGET=" + std::to_string(32ull << 20);
    }
  }
  env.push_back("MEMSHIM_LOG=info");
  const ProgramResult r =
      RunProgram({MEMSHIM_HOST_HANDOFF, std::to_string(kBlock), "24", "4", "12"}, env, true);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "blocks"), "32") << r.out;
  EXPECT_EQ(Field(r.out, "mismatches"), "0") << r.out;
  // "device 0: ... host slots asked of other cores N times (M MiB given back)"
  const size_t line = r.out.find("device 0: device chunks peak");
  ASSERT_NE(line, std::string::npos) << r.out;
  const std::string key = "host slots asked of other cores ";
  const size_t at = r.out.find(key, line);
  ASSERT_NE(at, std::string::npos) << r.out;
  unsigned long long asked = 0, given_mib = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at + key.size(), "%llu times (%llu MiB given back)", &asked,
                        &given_mib),
            2)
      << r.out;
  EXPECT_GT(asked, 0u) << r.out;
  EXPECT_GT(given_mib, 0u) << r.out;
}

// The shim's "graph exec ... retired:" log lines (MEMSHIM_LOG=info), one per
// destroyed executable graph.
std::vector<std::string> RetiredGraphLines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("graph exec") != std::string::npos &&
        line.find("retired:") != std::string::npos) {
      lines.push_back(line);
    }
  }
  return lines;
}

TEST(GraphWorkloadTest, GraphLaunchesAtThreeTimesDeviceMemoryMatchUnconstrainedRun) {
  const std::string footprint = std::to_string(3 * kDevice);
  const std::string iterations = "3";
  const ProgramResult reference =
      RunProgram({MEMSHIM_GRAPH_WORKLOAD, kKernels, footprint, iterations}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const std::string expected = Field(reference.out, "checksum");
  ASSERT_EQ(expected.size(), 16u);

  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSHIM_LOG=info");
  const ProgramResult shim = RunProgram({MEMSHIM_GRAPH_WORKLOAD, kKernels, footprint, iterations},
                                        env, /*with_stderr=*/true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), expected);
  EXPECT_GE(std::stoull(Field(shim.out, "footprint_bytes")), 3 * kDevice - (1 << 20));
  // Every graph got a record of its references, each of its launches used it
  // (none was opaque), and the launches paged evicted data back in.
  const std::vector<std::string> retired = RetiredGraphLines(shim.out);
  ASSERT_EQ(retired.size(), 8u) << shim.out;
  uint64_t page_ins = 0;
  for (const std::string& line : retired) {
    EXPECT_EQ(Field(line, "resident_set"), "yes") << line;
    EXPECT_EQ(Field(line, "graph_launches"), iterations) << line;
    EXPECT_EQ(Field(line, "opaque_launches"), "0") << line;
    page_ins += std::stoull(Field(line, "graph_page_ins"));
  }
  EXPECT_GT(page_ins, 0u) << shim.out;

  // Without the shim the same program does not fit.
  const ProgramResult plain =
      RunProgram({MEMSHIM_GRAPH_WORKLOAD, kKernels, footprint, iterations}, SimEnv(kDevice));
  EXPECT_EQ(plain.exit_code, 3) << plain.out;
}

// Capture on a blocking stream while legacy-stream work may be pending: the
// shim must not touch the legacy stream during the capture (that would
// invalidate it with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), even when it evicts.
TEST(GraphWorkloadTest, BlockingStreamCaptureAfterLegacyStreamWork) {
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult reference = RunProgram(
      {MEMSHIM_GRAPH_WORKLOAD, kKernels, footprint, "2", "blocking"}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const ProgramResult shim = RunProgram(
      {MEMSHIM_GRAPH_WORKLOAD, kKernels, footprint, "2", "blocking"}, ShimEnv(kDevice), true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), Field(reference.out, "checksum"));
}

// A GLOBAL-mode capture on one thread while another thread allocates and
// launches under the shim at 3x the device: the shim's own event records,
// queries and waits run in RELAXED mode (Note [relaxed driver sequences]), so
// the strict driver never refuses them nor invalidates the capture.
TEST(GraphWorkloadTest, GlobalCaptureOnOneThreadWhileAnotherPagesUnderTheShim) {
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult reference = RunProgram(
      {MEMSHIM_CAPTURE_CONCURRENT, kKernels, footprint, "sequential"}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const std::string expected = Field(reference.out, "checksum");
  ASSERT_EQ(expected.size(), 16u);
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSHIM_EVENT_PACE=0");  // a batched event every 32 launches: many queries
  const ProgramResult shim = RunProgram(
      {MEMSHIM_CAPTURE_CONCURRENT, kKernels, footprint, "overlap"}, env, /*with_stderr=*/true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "checksum"), expected);
  EXPECT_GE(std::stoull(Field(shim.out, "footprint_bytes")), 3 * kDevice - (1 << 20));
  // The same program without the shim (its worker allocates and frees in
  // RELAXED mode, as the driver requires): the same result.
  const ProgramResult plain = RunProgram(
      {MEMSHIM_CAPTURE_CONCURRENT, kKernels, footprint, "overlap"}, SimEnv(1ull << 30), true);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(Field(plain.out, "checksum"), expected);
}

// Note [unsafe calls during capture]: cuMemAlloc in GLOBAL mode while another
// thread captures in GLOBAL mode fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// (900) and the capture ends with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901),
// under the shim as on the driver, although the shim serves the allocation
// itself. (The driver refusing it is also what shows that the shim's own
// calls, which must not be refused, would be: the test above.)
TEST(GraphWorkloadTest, UnsafeAllocationDuringAnotherThreadsGlobalCaptureFailsAsOnTheDriver) {
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult plain = RunProgram(
      {MEMSHIM_CAPTURE_CONCURRENT, kKernels, footprint, "unsafe"}, SimEnv(1ull << 30), true);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(Field(plain.out, "alloc"), "900") << plain.out;
  EXPECT_EQ(Field(plain.out, "end"), "901") << plain.out;
  const ProgramResult shim = RunProgram({MEMSHIM_CAPTURE_CONCURRENT, kKernels, footprint, "unsafe"},
                                        ShimEnv(kDevice), true);
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(Field(shim.out, "alloc"), "900") << shim.out;
  EXPECT_EQ(Field(shim.out, "end"), "901") << shim.out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Note [pointer attributes]: every attribute of cuPointerGetAttribute(s) on
// shim memory is answered as the strict driver answers it for cuMemAlloc
// memory of the same size (base and interior pointers, untouched and written
// memory, freed memory, malformed requests), attribute by attribute. The one
// difference: shim memory is not legacy-IPC capable (VMM chunks).
TEST(PointerAttributesTest, ShimMemoryAnswersAsCuMemAllocMemory) {
  const ProgramResult reference = RunProgram({MEMSHIM_POINTER_ATTRIBUTES}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  const ProgramResult shim = RunProgram({MEMSHIM_POINTER_ATTRIBUTES}, ShimEnv(1ull << 30));
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  const std::vector<std::string> expected = Lines(reference.out);
  const std::vector<std::string> got = Lines(shim.out);
  ASSERT_EQ(got.size(), expected.size());
  ASSERT_GT(expected.size(), 7u * 21 * 2);  // 7 cases x 21 attributes x 2 calls, + malformed
  // Every answer equal, IS_LEGACY_CUDA_IPC_CAPABLE included (Note [shim ipc]).
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(got[i], expected[i]);
  // cuPointerGetAttributes leaves no entry unwritten (0xab bytes would show).
  for (const std::string& line : got) {
    if (line.find(" multi ") == std::string::npos) continue;
    const std::string value = Field(line, "value");
    EXPECT_NE(value.substr(0, 8), "abababab") << line;
  }
}

TEST(ProcAddressTest, DriverReachedOnlyThroughLookupsIsIntercepted) {
  const ProgramResult r =
      RunProgram({MEMSHIM_PROCADDR_ONLY, kKernels, std::to_string(kDevice)}, ShimEnv(kDevice));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "intercepted"), "yes");
  EXPECT_EQ(Field(r.out, "mismatches"), "0");
  EXPECT_GT(std::stoull(Field(r.out, "total")), kDevice);  // virtual capacity
}

TEST(ProcAddressTest, WithoutTheShimNothingIsIntercepted) {
  const ProgramResult r =
      RunProgram({MEMSHIM_PROCADDR_ONLY, kKernels, std::to_string(kDevice / 4)}, SimEnv(kDevice));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "intercepted"), "no");
}

// Note [entry-point substitution] (shim/hooks/hooks_lookup.cc): every
// flavour of every hooked name, at the version cudaTypedefs.h gives it and at
// the toolkit's version, plain and per-thread, through cuGetProcAddress,
// cuGetProcAddress_v2 and dlsym, is the shim's hook of the flavour the
// generated table names; the program checks each hook's prototype against the
// version's PFN typedef at compile time, and computes the reference checksums
// at 3x the device through entry points looked up at 2000..10020.
TEST(ProcAddressTest, EveryHookedFlavourAtEveryVersionIsItsHook) {
  const ProgramResult r = RunProgram(
      {MEMSHIM_ENTRY_POINTS, kShim, kKernels, std::to_string(kDevice)}, ShimEnv(kDevice));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "wrong"), "0") << r.out;
  EXPECT_EQ(Field(r.out, "unanswered"), "0") << r.out;
  EXPECT_GE(std::stoi(Field(r.out, "lookups")), 500);
  EXPECT_EQ(Field(r.out, "mismatches"), "0");
  EXPECT_EQ(std::stoull(Field(r.out, "blocks")), 3 * kDevice / (8 << 20));
  // Note [32-bit entry points]: the shim hands out no 32-bit device memory.
  EXPECT_EQ(Field(r.out, "legacy_alloc"), std::to_string(801));  // CUDA_ERROR_NOT_SUPPORTED
}

// Note [hidden reach] (shim/core/shim_core_hidden_reach.cc): kernels that
// reach data blocks of 3x the device only through addresses the argument scan
// cannot see (a pointer array in device memory; an address at an unaligned
// offset of a 128-byte parameter, as in a tensor map) fill and read them while
// copies on another stream page other blocks in and out. No illegal address
// (every block is backed from allocation) and no lost write (no chunk is
// paged out under such a kernel): every block matches its pattern.
void ExpectEveryBlockFilledThroughHiddenAddresses(const char* mode,
                                                  const std::string& hidden_reach = "") {
  std::vector<std::string> env = ShimEnv(kDevice);
  env.push_back("MEMSHIM_HIDDEN_REACH=" + hidden_reach);
  const ProgramResult r =
      RunProgram({MEMSHIM_HIDDEN_POINTERS, kKernels, std::to_string(kDevice), mode}, env);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "mismatches"), "0");
  EXPECT_EQ(Field(r.out, "blocks"), std::to_string(3 * kDevice / (8 << 20)));
}

TEST(HiddenPointersTest, PointerArrayInDeviceMemoryUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("array");
}

TEST(HiddenPointersTest, AddressInsideAStructParameterUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("struct");
}

// Pointer arrays the shim recognizes by scanning every host-to-device copy
// and following addresses through device copies and kernels (Note [hidden
// reach]): a copy of more than 64 KiB, a 2D copy from pitched host rows, an
// array a kernel copies from another one, an array in device memory outside
// the reservation (as a module variable is: every launch is then fenced),
// and graph launches whose kernels read an array.
TEST(HiddenPointersTest, PointerArrayWrittenByALargeCopyUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("large");
}

TEST(HiddenPointersTest, PointerArrayWrittenByA2DCopyUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("copy2d");
}

TEST(HiddenPointersTest, PointerArrayWrittenByAKernelUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("device");
}

TEST(HiddenPointersTest, PointerArrayOutsideTheReservationUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("global");
}

TEST(HiddenPointersTest, GraphKernelsReadingAPointerArrayUnderEvictionPressure) {
  ExpectEveryBlockFilledThroughHiddenAddresses("graph");
}

// Note [hidden reach everywhere]: an array a kernel builds from addresses it
// was given as plain arguments, with MEMSHIM_HIDDEN_REACH=all.
TEST(HiddenPointersTest, PointerArrayBuiltFromPlainArgumentsWithHiddenReachAll) {
  ExpectEveryBlockFilledThroughHiddenAddresses("args", "all");
}

// One test per mode: each run takes about a minute under TSan, all eight
// together exceeded the test timeout there.
class HiddenPointersUnconstrainedTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HiddenPointersUnconstrainedTest, WithoutTheShim) {
  const char* mode = GetParam();
  const ProgramResult r = RunProgram(
      {MEMSHIM_HIDDEN_POINTERS, kKernels, std::to_string(kDevice), mode}, SimEnv(8 * kDevice));
  ASSERT_EQ(r.exit_code, 0) << mode << ": " << r.out;
  EXPECT_EQ(Field(r.out, "mismatches"), "0") << mode;
}

INSTANTIATE_TEST_SUITE_P(Modes, HiddenPointersUnconstrainedTest,
                         ::testing::Values("array", "struct", "large", "copy2d", "device", "global",
                                           "graph", "args"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// Note [copy ranges] (shim/core/shim_core.h): copies and memsets past the end
// of an allocation fail under the shim as they do on the plain driver,
// without writing the neighbouring allocations or poisoning the context.
TEST(CopyBoundsTest, OutOfRangeCopiesFailAsWithoutTheShim) {
  const ProgramResult driver = RunProgram({MEMSHIM_COPY_BOUNDS}, SimEnv(kDevice));
  const ProgramResult shim = RunProgram({MEMSHIM_COPY_BOUNDS}, ShimEnv(kDevice));
  ASSERT_EQ(driver.exit_code, 0) << driver.out;
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  const std::string invalid_value = std::to_string(kCudaErrorInvalidValue);
  for (const char* name :
       {"htod_past_end", "htod_async_past_end", "memcpy2d_8k_into_4k", "dtod_read_past_end",
        "memcpy_read_past_end", "dtoh_read_past_end", "htod_size_max", "dtod_wraps_address_space",
        "memset_d8_past_end", "memset_d32_overflowing_count"}) {
    EXPECT_EQ(Field(driver.out, name), invalid_value) << name;
    EXPECT_EQ(Field(shim.out, name), Field(driver.out, name)) << name;
  }
  for (const ProgramResult* run : {&driver, &shim}) {
    EXPECT_EQ(Field(run->out, "neighbours"), "unchanged") << run->out;
    EXPECT_EQ(Field(run->out, "targets"), "unchanged") << run->out;
    EXPECT_EQ(Field(run->out, "valid_copy_after"), "0") << run->out;
    EXPECT_EQ(Field(run->out, "synchronize_after"), "0") << run->out;
  }
}

// Batched copies, 3D peer copies and stream memory operations queued behind
// a gate while the host pages a footprint 3x the device (passthru_ops.cc):
// the bytes match an unconstrained run.
class PassthruOpsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(PassthruOpsTest, QueuedOperationMatchesUnconstrainedRunAtThreeTimesTheDevice) {
  const std::string footprint = std::to_string(3 * kDevice);
  const ProgramResult reference =
      RunProgram({MEMSHIM_PASSTHRU_OPS, GetParam(), footprint}, SimEnv(1ull << 30));
  ASSERT_EQ(reference.exit_code, 0) << reference.out;
  ASSERT_EQ(Field(reference.out, "result"), "0") << reference.out;
  const ProgramResult shim =
      RunProgram({MEMSHIM_PASSTHRU_OPS, GetParam(), footprint}, ShimEnv(kDevice));
  ASSERT_EQ(shim.exit_code, 0) << shim.out;
  EXPECT_EQ(shim.out, reference.out);
}

INSTANTIATE_TEST_SUITE_P(Operations, PassthruOpsTest,
                         ::testing::Values("batch", "peer3d", "value", "batchmemop"));

}  // namespace
}  // namespace memvirt::testing

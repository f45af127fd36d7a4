// Legacy IPC of shim memory between two processes on one simulated node
// (Note [shim ipc] in shim/core/ipc_export.h): tests/shim/ipc_exchange.cc run
// with and without the shim.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "tests/shim/run_program.h"

namespace memvirt::testing {
namespace {

const std::string kShim = MEMSHIM_LIBRARY;
const std::string kSimDir = MEMSIM_LIBRARY_DIR;
const std::string kExchange = MEMSHIM_IPC_EXCHANGE;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBlock = 16 * kMiB;        // the shared tensor
constexpr uint64_t kBudget = 32 * kMiB;       // per process, under the shim
constexpr uint64_t kPressure = 96 * kMiB;     // each process's other memory: 3x its budget
constexpr uint64_t kNodeDevice = 256 * kMiB;  // the simulated device both share

// Both processes on one MEMSIM_NODE (shared device capacity); the importer
// inherits this environment.
std::vector<std::string> NodeEnv(const std::string& test, uint64_t node_device = kNodeDevice) {
  return {"LD_LIBRARY_PATH=" + kSimDir,
          "MEMSIM_DEVICE_MEMORY=" + std::to_string(node_device),
          "MEMSIM_NODE=memshim-ipc-" + test + "-" + std::to_string(getpid()),
          "LD_PRELOAD=",
          "MEMSHIM_DISABLE=",
          "IPC_IMPORTER_WITHOUT_DISABLE="};
}

std::vector<std::string> ShimEnv(const std::string& test, uint64_t budget = kBudget,
                                 uint64_t node_device = kNodeDevice) {
  std::vector<std::string> env = NodeEnv(test, node_device);
  env.push_back("LD_PRELOAD=" + kShim);
  env.push_back("MEMSHIM_DEVICE_BUDGET=" + std::to_string(budget));
  env.push_back("MEMSHIM_HOST_BUDGET=1G");
  env.push_back("MEMSHIM_DAEMON_SOCKET=/nonexistent/memvirtd.sock");
  env.push_back("MEMSHIM_LOG=debug");
  return env;
}

void ExpectExchanged(const ProgramResult& r) {
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "importer_open"), "0") << r.out;
  EXPECT_EQ(Field(r.out, "importer_reopen_same"), "yes") << r.out;
  EXPECT_EQ(Field(r.out, "importer_reads"), "ok") << r.out;
  EXPECT_EQ(Field(r.out, "importer_reads_back"), "ok") << r.out;
  EXPECT_EQ(Field(r.out, "exporter_sees_write"), "ok") << r.out;
  EXPECT_EQ(Field(r.out, "importer_close"), "0") << r.out;
  EXPECT_EQ(Field(r.out, "importer_exit"), "0") << r.out;
  EXPECT_EQ(Field(r.out, "after_close"), "ok") << r.out;
  EXPECT_EQ(Field(r.out, "exporter_pressure"), "ok") << r.out;
  EXPECT_EQ(Field(r.out, "importer_pressure"), "ok") << r.out;
}

TEST(ShimIpcTest, TwoOversubscribedProcessesExchangeABlockUnderTheShim) {
  const ProgramResult r = RunProgram({kExchange, "exporter", std::to_string(kBlock),
                                      std::to_string(kPressure), std::to_string(kPressure)},
                                     ShimEnv("both"), /*with_stderr=*/true);
  ExpectExchanged(r);
  EXPECT_EQ(Field(r.out, "same_handle"), "yes");
  EXPECT_EQ(Field(r.out, "interior_handle"), "1");  // CUDA_ERROR_INVALID_VALUE, as the driver
  EXPECT_EQ(Field(r.out, "self_open"), "201");      // CUDA_ERROR_INVALID_CONTEXT, as the driver
  EXPECT_EQ(Field(r.out, "ipc_capable"), "1");
  EXPECT_EQ(Field(r.out, "importer_bad_listener"), "205");  // CUDA_ERROR_MAP_FAILED: no exporter
  EXPECT_EQ(Field(r.out, "importer_bad_token"), "1");       // refused by the exporter
  EXPECT_EQ(Field(r.out, "importer_bad_bytes"), "1");       // refused before asking
  // Note [retained handles]: as the driver answers for cuMemAlloc memory.
  EXPECT_EQ(Field(r.out, "retain_handle"), "1");
  // The exporter unpinned the block once, after it saw the importer's write
  // (the importer closes only after that line).
  const size_t unpinned = r.out.find("unpinned");
  ASSERT_NE(unpinned, std::string::npos) << r.out;
  EXPECT_GT(unpinned, r.out.find("exporter_sees_write"));
  EXPECT_EQ(r.out.find("unpinned", unpinned + 1), std::string::npos);
}

TEST(ShimIpcTest, ABlockOfMoreChunksThanOneMessageCarriesIsExchanged) {
  // 68 chunks: their descriptors travel in two messages (kIpcFdsPerMessage = 64).
  constexpr uint64_t kLarge = 136 * kMiB;
  const ProgramResult r =
      RunProgram({kExchange, "exporter", std::to_string(kLarge), std::to_string(64 * kMiB),
                  std::to_string(64 * kMiB)},
                 ShimEnv("large", /*budget=*/160 * kMiB, /*node_device=*/512 * kMiB));
  ExpectExchanged(r);
}

TEST(ShimIpcTest, TheSameExchangeWithoutTheShim) {
  // The reference: the plain simulated driver's own legacy IPC, no paging.
  const ProgramResult r =
      RunProgram({kExchange, "exporter", std::to_string(kBlock), "0", "0"}, NodeEnv("plain"));
  ExpectExchanged(r);
  EXPECT_EQ(Field(r.out, "interior_handle"), "1");
  EXPECT_EQ(Field(r.out, "self_open"), "201");
  EXPECT_EQ(Field(r.out, "ipc_capable"), "1");
  EXPECT_EQ(Field(r.out, "retain_handle"), "1");
}

TEST(ShimIpcTest, DriverHandleOfPassedThroughMemoryOpensUnderTheShim) {
  // The exporter passes cuMemAlloc through (MEMSHIM_DISABLE=1): its handle
  // is the driver's, which the importer's shim forwards to the driver.
  std::vector<std::string> env = ShimEnv("driver");
  env.push_back("MEMSHIM_DISABLE=1");
  env.push_back("IPC_IMPORTER_WITHOUT_DISABLE=1");
  const ProgramResult r = RunProgram(
      {kExchange, "exporter", std::to_string(kBlock), "0", std::to_string(kPressure)}, env,
      /*with_stderr=*/true);
  ExpectExchanged(r);
  EXPECT_EQ(r.out.find("unpinned"), std::string::npos);  // nothing of the shim's was exported
}

}  // namespace
}  // namespace memvirt::testing

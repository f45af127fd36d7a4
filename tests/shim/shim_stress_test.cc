// The randomized stress program under the shim at 4x oversubscription.
#include <gtest/gtest.h>

#include <string>

#include "tests/shim/run_program.h"

namespace memvirt::testing {
namespace {

TEST(ShimStressTest, HundredThousandRandomOperationsAtFourTimesOversubscription) {
  constexpr uint64_t kDevice = 64ull << 20;
  const ProgramResult r = RunProgram(
      {MEMSHIM_STRESS, MEMSHIM_TEST_KERNELS, "100000", std::to_string(kDevice), "4", "7"},
      {"LD_LIBRARY_PATH=" MEMSIM_LIBRARY_DIR, "MEMSIM_DEVICE_MEMORY=" + std::to_string(kDevice),
       "LD_PRELOAD=" MEMSHIM_LIBRARY, "MEMSHIM_HOST_BUDGET=1G",
       "MEMSHIM_DISABLE=", "MEMSIM_NODE=", "MEMSHIM_DAEMON_SOCKET=/nonexistent/memvirtd.sock"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(Field(r.out, "mismatches"), "0");
  EXPECT_EQ(Field(r.out, "ops"), "100000");
  EXPECT_GT(std::stoull(Field(r.out, "peak_live_bytes")), 3 * kDevice);
}

}  // namespace
}  // namespace memvirt::testing

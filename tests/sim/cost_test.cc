// Costs a GPU has and the sim models: memory committed at allocation, so the first copy into
// fresh memory runs at the modelled link speed (Note [committed at allocation]), and the
// configurable cost of mapping calls (MEMSIM_MAP_US, Note [map cost]). Runs with
// MEMSIM_H2D_GBPS=2 and MEMSIM_MAP_US=2000. Timings are printed, not asserted, except the lower
// bound the map cost guarantees.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim(
    {{"MEMSIM_DEVICE_MEMORY", "512M"}, {"MEMSIM_H2D_GBPS", "2"}, {"MEMSIM_MAP_US", "2000"}});

constexpr size_t kBytes = 64u << 20;
constexpr size_t kPages = kBytes / 4096;
constexpr size_t kChunk = 2u << 20;

long MinorFaults() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

class SimCommitTest : public SimTest {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "TSan's shadow memory faults on first touch";
#endif
    SimTest::SetUp();
    source_ = Pattern(kBytes / 4, 21);  // touched: its faults are not the copy's
  }
  // Copies kBytes from the host into `dst` (fresh memory) and returns the minor page faults
  // the copy took. Prints the copy time next to the modelled time.
  long FirstCopyFaults(CUdeviceptr dst, const char* what) {
    const long before = MinorFaults();
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_CU(cuMemcpyHtoD(dst, source_.data(), kBytes));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const long faults = MinorFaults() - before;
    std::printf("first 64 MiB copy into fresh %s memory: %.1f ms (model %.1f ms), %ld faults\n",
                what, ms, kBytes / 2e9 * 1e3, faults);
    std::vector<uint32_t> back(kBytes / 4);
    EXPECT_CU(cuMemcpyDtoH(back.data(), dst, kBytes));
    EXPECT_EQ(Checksum(back.data(), kBytes), Checksum(source_.data(), kBytes));
    return faults;
  }

  std::vector<uint32_t> source_;
};

// A fresh 4 KiB page costs one fault when touched first; committed memory none. The bound
// leaves room for a sanitizer's shadow (ASan: one page per 8 of the destination).
TEST_F(SimCommitTest, CuMemAllocMemoryIsCommittedAtAllocation) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kBytes));
  EXPECT_LT(FirstCopyFaults(d, "cuMemAlloc"), static_cast<long>(kPages / 4));
  EXPECT_CU(cuMemFree(d));
}

TEST_F(SimCommitTest, PoolMemoryIsCommittedAtAllocation) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAllocAsync(&d, kBytes, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_LT(FirstCopyFaults(d, "cuMemAllocAsync"), static_cast<long>(kPages / 4));
  EXPECT_CU(cuMemFreeAsync(d, nullptr));
  EXPECT_CU(cuCtxSynchronize());
}

TEST_F(SimCommitTest, PhysicalMemoryIsCommittedWhenCreatedAndMappedWhenGrantedAccess) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(ReserveAndCreate(kBytes, &va, &h));
  ASSERT_CU(cuMemMap(va, kBytes, 0, h, 0));
  const CUmemAccessDesc rw = DeviceAccess(0);
  ASSERT_CU(cuMemSetAccess(va, kBytes, &rw, 1));
  EXPECT_LT(FirstCopyFaults(va, "cuMemCreate"), static_cast<long>(kPages / 4));
  EXPECT_CU(cuMemUnmap(va, kBytes));
  EXPECT_CU(cuMemRelease(h));
  EXPECT_CU(cuMemAddressFree(va, kBytes));
}

using SimMapCostTest = SimTest;

double SecondsOf(const std::function<CUresult()>& call) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_CU(call());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(SimMapCostTest, MapSetAccessAndUnmapEachTakeAtLeastTheConfiguredCost) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(ReserveAndCreate(kChunk, &va, &h));
  const CUmemAccessDesc rw = DeviceAccess(0);
  EXPECT_GE(SecondsOf([&] { return cuMemMap(va, kChunk, 0, h, 0); }), 2e-3);
  EXPECT_GE(SecondsOf([&] { return cuMemSetAccess(va, kChunk, &rw, 1); }), 2e-3);
  EXPECT_GE(SecondsOf([&] { return cuMemUnmap(va, kChunk); }), 2e-3);
  EXPECT_CU(cuMemRelease(h));
  EXPECT_CU(cuMemAddressFree(va, kChunk));
}

}  // namespace
}  // namespace memsim_test

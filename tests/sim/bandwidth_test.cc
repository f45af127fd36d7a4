// Copy-engine bandwidth model: runs with MEMSIM_H2D_GBPS=1 and MEMSIM_D2H_GBPS=1 (a modelled
// link slow enough that memcpy stays inside the booked window even on a loaded machine).
// The issue asks for ±10% accuracy; the model can only be slowed down by a loaded machine (it
// sleeps until the booked end), so each measurement takes the best of five runs. Copies and
// memsets reaching host-NUMA memory through a device address (Note [host-backed transfers] in
// sim/src/link_charge.h) are checked against the modelled time as a lower bound only.
#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim(
    {{"MEMSIM_DEVICE_MEMORY", "512M"}, {"MEMSIM_H2D_GBPS", "1"}, {"MEMSIM_D2H_GBPS", "1"}});

// Sanitizer runtimes slow host memcpy far below the modelled link, so the timing assertions are
// only meaningful in an uninstrumented build (sanitizer runs check the sim's memory safety).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kTimingMeaningful = false;
#else
constexpr bool kTimingMeaningful = true;
#endif

constexpr size_t kBytes = 64u << 20;
constexpr double kGbps = 1.0;
constexpr double kModelSeconds = kBytes / (kGbps * 1e9);

class SimBandwidthTest : public SimTest {
 protected:
  void SetUp() override {
    if (!kTimingMeaningful) GTEST_SKIP() << "copy timing is distorted by the sanitizer runtime";
    SimTest::SetUp();
    ASSERT_CU(cuMemAllocHost(&host_, 2 * kBytes));
    ASSERT_CU(cuMemAlloc(&dev_a_, kBytes));
    ASSERT_CU(cuMemAlloc(&dev_b_, kBytes));
    // Touch every page first so that page faults are not part of the measurement.
    std::fill_n(static_cast<unsigned char*>(host_), 2 * kBytes, 0x3c);
    ASSERT_CU(cuMemsetD8(dev_a_, 1, kBytes));
    ASSERT_CU(cuMemsetD8(dev_b_, 2, kBytes));
    ASSERT_CU(cuStreamCreate(&s1_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&s2_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    cuStreamDestroy(s1_);
    cuStreamDestroy(s2_);
    cuMemFree(dev_a_);
    cuMemFree(dev_b_);
    cuMemFreeHost(host_);
    SimTest::TearDown();
  }
  template <typename F>
  double BestSeconds(F&& f) {
    double best = 1e9;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
    }
    return best;
  }
  unsigned char* host(size_t offset = 0) { return static_cast<unsigned char*>(host_) + offset; }

  void* host_ = nullptr;
  CUdeviceptr dev_a_ = 0, dev_b_ = 0;
  CUstream s1_ = nullptr, s2_ = nullptr;
};

TEST_F(SimBandwidthTest, HostToDeviceRateMatchesTheModelWithinTenPercent) {
  const double s = BestSeconds([&] { ASSERT_CU(cuMemcpyHtoD(dev_a_, host(), kBytes)); });
  const double gbps = kBytes / s / 1e9;
  RecordProperty("h2d_gbps", std::to_string(gbps));
  EXPECT_NEAR(gbps, kGbps, 0.1 * kGbps);
}

TEST_F(SimBandwidthTest, DeviceToHostRateMatchesTheModelWithinTenPercent) {
  const double s = BestSeconds([&] {
    ASSERT_CU(cuMemcpyDtoHAsync(host(), dev_a_, kBytes, s1_));
    ASSERT_CU(cuStreamSynchronize(s1_));
  });
  const double gbps = kBytes / s / 1e9;
  RecordProperty("d2h_gbps", std::to_string(gbps));
  EXPECT_NEAR(gbps, kGbps, 0.1 * kGbps);
}

TEST_F(SimBandwidthTest, CopiesInOneDirectionShareTheEngine) {
  const double s = BestSeconds([&] {
    ASSERT_CU(cuMemcpyHtoDAsync(dev_a_, host(), kBytes, s1_));
    ASSERT_CU(cuMemcpyHtoDAsync(dev_b_, host(kBytes), kBytes, s2_));
    ASSERT_CU(cuStreamSynchronize(s1_));
    ASSERT_CU(cuStreamSynchronize(s2_));
  });
  // Serialized: at least twice the single-copy time (the engine is booked back to back), and
  // nowhere near the overlapped time.
  EXPECT_GE(s, 2 * kModelSeconds * 0.99);
  EXPECT_LT(s, 2 * kModelSeconds * 1.25);
}

TEST_F(SimBandwidthTest, HostToDeviceOverlapsDeviceToHost) {
  const double s = BestSeconds([&] {
    ASSERT_CU(cuMemcpyHtoDAsync(dev_a_, host(), kBytes, s1_));
    ASSERT_CU(cuMemcpyDtoHAsync(host(kBytes), dev_b_, kBytes, s2_));
    ASSERT_CU(cuStreamSynchronize(s1_));
    ASSERT_CU(cuStreamSynchronize(s2_));
  });
  // The directions overlap: about one copy's time, clearly below the serialized 2x.
  EXPECT_GE(s, kModelSeconds * 0.99);
  EXPECT_LT(s, kModelSeconds * 1.5);
}

TEST_F(SimBandwidthTest, DeviceToDeviceCopiesAreNotThrottled) {
  const double s = BestSeconds([&] { ASSERT_CU(cuMemcpyDtoD(dev_b_, dev_a_, kBytes)); });
  EXPECT_LT(s, kModelSeconds);  // a throttled copy would take at least the model time
  std::vector<unsigned char> a(4096), b(4096);
  ASSERT_CU(cuMemcpyDtoH(a.data(), dev_a_ + kBytes - 4096, 4096));
  ASSERT_CU(cuMemcpyDtoH(b.data(), dev_b_ + kBytes - 4096, 4096));
  EXPECT_EQ(a, b);
}

// Host-NUMA physical memory mapped into the device's address space, as the shim keeps its host
// tier: copies between it and device memory cross the link although both ends are device
// addresses (cuMemcpyDtoD).
class SimHostNumaLinkTest : public SimBandwidthTest {
 protected:
  void SetUp() override {
    SimBandwidthTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_CU(cuMemAddressReserve(&numa_, kBytes, 0, 0, 0));
    const CUmemAllocationProp prop = PinnedProp(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
    ASSERT_CU(cuMemCreate(&handle_, kBytes, &prop, 0));
    ASSERT_CU(cuMemMap(numa_, kBytes, 0, handle_, 0));
    const CUmemAccessDesc rw = DeviceAccess(0);
    ASSERT_CU(cuMemSetAccess(numa_, kBytes, &rw, 1));
  }
  void TearDown() override {
    if (numa_ != 0) {
      cuMemUnmap(numa_, kBytes);
      cuMemRelease(handle_);
      cuMemAddressFree(numa_, kBytes);
    }
    SimBandwidthTest::TearDown();
  }
  static double SecondsOf(const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  uint64_t DeviceChecksum(CUdeviceptr p) {
    std::vector<unsigned char> bytes(kBytes);
    EXPECT_CU(cuMemcpyDtoH(bytes.data(), p, kBytes));
    return Checksum(bytes.data(), kBytes);
  }

  CUdeviceptr numa_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
};

TEST_F(SimHostNumaLinkTest, PageOutToHostNumaTakesAtLeastTheModelledTime) {
  const double s = SecondsOf([&] { ASSERT_CU(cuMemcpyDtoD(numa_, dev_a_, kBytes)); });
  EXPECT_GE(s, kModelSeconds);
  EXPECT_EQ(DeviceChecksum(numa_), DeviceChecksum(dev_a_));
}

TEST_F(SimHostNumaLinkTest, PageInFromHostNumaTakesAtLeastTheModelledTime) {
  ASSERT_CU(cuMemsetD8(numa_, 7, kBytes));
  const double s = SecondsOf([&] {
    ASSERT_CU(cuMemcpyDtoDAsync(dev_b_, numa_, kBytes, s1_));
    ASSERT_CU(cuStreamSynchronize(s1_));
  });
  EXPECT_GE(s, kModelSeconds);
  EXPECT_EQ(DeviceChecksum(dev_b_), DeviceChecksum(numa_));
}

TEST_F(SimHostNumaLinkTest, MemsetOfHostNumaTakesAtLeastTheModelledTime) {
  const double s = SecondsOf([&] { ASSERT_CU(cuMemsetD32(numa_, 0x5a5a5a5a, kBytes / 4)); });
  EXPECT_GE(s, kModelSeconds);
  std::vector<unsigned char> expected(kBytes, 0x5a);
  EXPECT_EQ(DeviceChecksum(numa_), Checksum(expected.data(), kBytes));
}

}  // namespace
}  // namespace memsim_test

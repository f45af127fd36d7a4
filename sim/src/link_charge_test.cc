// The link charges of copies and memsets (Note [host-backed transfers]): which engine, how many
// bytes, and how long the booking holds the engine. Asserts on the engines' bookkeeping, not on
// wall-clock time.
#include "link_charge.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>

#include "config.h"
#include "device.h"
#include "physical.h"

namespace memsim {
namespace {

constexpr uint64_t kBytes = 64ULL << 20;
constexpr double kGbps = 1.0;

CUmemAllocationProp PropAt(CUmemLocationType type) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  return prop;
}

// One device with, in one reservation: kBytes of device-located memory at device_, then
// kBytes of host-NUMA memory at numa_ (adjacent, so a range can span both).
class LinkChargeTest : public ::testing::Test {
 protected:
  void SetUpDevice(double gbps) {
    Config config;
    config.h2d_gbps = gbps;
    config.d2h_gbps = gbps;
    config.va_size = 1ULL << 30;
    dev_ = Device::Create(0, config);
    ASSERT_NE(dev_, nullptr);
    uint64_t base = 0;
    ASSERT_EQ(dev_->va().Reserve(2 * kBytes, 0, 0, &base), CUDA_SUCCESS);
    device_ = base;
    numa_ = base + kBytes;
    auto on_device = Physical::Create(kBytes, PropAt(CU_MEM_LOCATION_TYPE_DEVICE), nullptr);
    auto on_host = Physical::Create(kBytes, PropAt(CU_MEM_LOCATION_TYPE_HOST_NUMA), nullptr);
    ASSERT_NE(on_device, nullptr);
    ASSERT_NE(on_host, nullptr);
    ASSERT_EQ(dev_->va().Map(device_, kBytes, 0, on_device), CUDA_SUCCESS);
    ASSERT_EQ(dev_->va().Map(numa_, kBytes, 0, on_host), CUDA_SUCCESS);
  }
  void SetUp() override { SetUpDevice(kGbps); }

  CopyEnd Dev(uint64_t addr) { return CopyEnd{addr, dev_.get()}; }
  CopyEnd Host() { return CopyEnd{reinterpret_cast<uint64_t>(&host_byte_), nullptr}; }

  std::unique_ptr<Device> dev_;
  uint64_t device_ = 0;
  uint64_t numa_ = 0;
  char host_byte_ = 0;  // plain host memory: only its address is used
};

TEST_F(LinkChargeTest, DeviceMemoryToHostNumaMappingIsDeviceToHost) {
  const LinkCharge c = ChargeOfCopy(Dev(numa_), kBytes, Dev(device_), kBytes, kBytes);
  EXPECT_EQ(c.d2h, &dev_->d2h());
  EXPECT_EQ(c.d2h_bytes, kBytes);
  EXPECT_EQ(c.h2d_bytes, 0u);
  EXPECT_TRUE(c.throttled());
}

TEST_F(LinkChargeTest, HostNumaMappingToDeviceMemoryIsHostToDevice) {
  const LinkCharge c = ChargeOfCopy(Dev(device_), kBytes, Dev(numa_), kBytes, kBytes);
  EXPECT_EQ(c.h2d, &dev_->h2d());
  EXPECT_EQ(c.h2d_bytes, kBytes);
  EXPECT_EQ(c.d2h_bytes, 0u);
}

TEST_F(LinkChargeTest, PlainHostCopiesKeepTheirEngines) {
  const LinkCharge h2d = ChargeOfCopy(Dev(device_), kBytes, Host(), kBytes, kBytes);
  EXPECT_EQ(h2d.h2d, &dev_->h2d());
  EXPECT_EQ(h2d.h2d_bytes, kBytes);
  EXPECT_EQ(h2d.d2h_bytes, 0u);
  const LinkCharge d2h = ChargeOfCopy(Host(), kBytes, Dev(device_), kBytes, kBytes);
  EXPECT_EQ(d2h.d2h, &dev_->d2h());
  EXPECT_EQ(d2h.d2h_bytes, kBytes);
  EXPECT_EQ(d2h.h2d_bytes, 0u);
}

TEST_F(LinkChargeTest, DeviceMemoryToDeviceMemoryCrossesNoLink) {
  const LinkCharge c =
      ChargeOfCopy(Dev(device_ + kBytes / 2), kBytes / 2, Dev(device_), kBytes / 2, kBytes / 2);
  EXPECT_EQ(c.h2d_bytes, 0u);
  EXPECT_EQ(c.d2h_bytes, 0u);
  EXPECT_FALSE(c.throttled());
}

TEST_F(LinkChargeTest, HostBackedToHostBackedThroughADeviceAddressCrossesBothWays) {
  const LinkCharge c = ChargeOfCopy(Host(), kBytes, Dev(numa_), kBytes, kBytes);
  EXPECT_EQ(c.h2d_bytes, kBytes);
  EXPECT_EQ(c.d2h_bytes, kBytes);
}

TEST_F(LinkChargeTest, TwoPlainHostPointersCrossNoLink) {
  const LinkCharge c = ChargeOfCopy(Host(), kBytes, Host(), kBytes, kBytes);
  EXPECT_EQ(c.h2d, nullptr);
  EXPECT_EQ(c.d2h, nullptr);
  EXPECT_FALSE(c.throttled());
}

TEST_F(LinkChargeTest, RangeSpanningDeviceAndHostMappingsChargesTheHostShare) {
  // 2 MiB of device memory followed by 6 MiB of the host-NUMA mapping.
  const uint64_t from = numa_ - (2ULL << 20);
  const LinkCharge c = ChargeOfCopy(Host(), 8ULL << 20, Dev(from), 8ULL << 20, 8ULL << 20);
  EXPECT_EQ(c.h2d_bytes, 6ULL << 20);
  EXPECT_EQ(c.d2h_bytes, 8ULL << 20);
  // A 2D copy of half the rows' extent: half of the bytes moved.
  const LinkCharge rows = ChargeOfCopy(Host(), 8ULL << 20, Dev(from), 8ULL << 20, 4ULL << 20);
  EXPECT_EQ(rows.h2d_bytes, 3ULL << 20);
}

TEST_F(LinkChargeTest, MemsetOfHostNumaMappingIsDeviceToHost) {
  const LinkCharge numa = ChargeOfMemset(*dev_, Dev(numa_), kBytes, kBytes);
  EXPECT_EQ(numa.d2h, &dev_->d2h());
  EXPECT_EQ(numa.d2h_bytes, kBytes);
  EXPECT_EQ(numa.h2d_bytes, 0u);
  const LinkCharge device = ChargeOfMemset(*dev_, Dev(device_), kBytes, kBytes);
  EXPECT_EQ(device.d2h_bytes, 0u);
  EXPECT_FALSE(device.throttled());
}

TEST_F(LinkChargeTest, BookingHoldsTheEngineForTheModelledTime) {
  const auto model = std::chrono::duration<double>(kBytes / (kGbps * 1e9));
  const auto before = CopyEngine::Clock::now();
  const LinkCharge c = ChargeOfCopy(Dev(device_), kBytes, Dev(numa_), kBytes, kBytes);
  const auto first = c.Book();
  EXPECT_GE(first - before, model);
  // A second copy on the same engine is booked behind the first.
  const auto second = c.Book();
  EXPECT_GE(second - first, model);
}

TEST_F(LinkChargeTest, EnginesCountTheBytesBooked) {
  const LinkCharge c = ChargeOfCopy(Dev(numa_), kBytes, Dev(device_), kBytes, kBytes);
  c.Book();
  c.Book();
  EXPECT_EQ(dev_->d2h().booked_bytes(), 2 * kBytes);
  EXPECT_EQ(dev_->h2d().booked_bytes(), 0u);
}

class UnthrottledLinkChargeTest : public LinkChargeTest {
 protected:
  void SetUp() override { SetUpDevice(0); }
};

TEST_F(UnthrottledLinkChargeTest, NothingIsBookedByDefault) {
  for (const LinkCharge& c : {ChargeOfCopy(Dev(device_), kBytes, Dev(numa_), kBytes, kBytes),
                              ChargeOfCopy(Dev(numa_), kBytes, Dev(device_), kBytes, kBytes),
                              ChargeOfMemset(*dev_, Dev(numa_), kBytes, kBytes)}) {
    EXPECT_EQ(c.h2d, nullptr);
    EXPECT_EQ(c.d2h, nullptr);
    EXPECT_FALSE(c.throttled());
  }
  dev_->h2d().Book(kBytes);
  EXPECT_EQ(dev_->h2d().booked_bytes(), 0u);
}

}  // namespace
}  // namespace memsim

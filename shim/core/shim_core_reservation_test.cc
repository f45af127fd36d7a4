// The size of the core's address reservation (Note [reservation size]).
#include <gtest/gtest.h>

#include <memory>

#include "shim/core/shim_core.h"
#include "shim/core/shim_core_test_fixture.h"

namespace memvirt::shim {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

CUresult MakeCore(testing::FakeDriver* fake, uint64_t va_bytes, std::unique_ptr<ShimCore>* core) {
  static StandaloneControlPlane control;
  CoreOptions options;
  options.device_budget = 16 * kMiB;
  options.host_budget = 64 * kMiB;
  options.va_bytes = va_bytes;
  return ShimCore::Create(&fake->driver(), options, &control, core);
}

TEST(ShimCoreReservationTest, DefaultIsSixteenTimesTheDevice) {
  testing::FakeDriver fake(256 * kMiB);
  std::unique_ptr<ShimCore> core;
  ASSERT_EQ(MakeCore(&fake, 0, &core), CUDA_SUCCESS);
  EXPECT_EQ(core->va_bytes(), 4 * kGiB);
  // An application reservation of the device's memory several times over fits.
  CUdeviceptr a = 0, b = 0, c = 0;
  ASSERT_EQ(core->AppReserve(288 * kMiB, 0, &a), CUDA_SUCCESS);
  ASSERT_EQ(core->AppReserve(288 * kMiB, 0, &b), CUDA_SUCCESS);
  ASSERT_EQ(core->AppReserve(288 * kMiB, 0, &c), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  EXPECT_EQ(core->Alloc(&p, 4 * kMiB), CUDA_SUCCESS);
}

TEST(ShimCoreReservationTest, ADriverRefusingTheDefaultGetsHalvingRequests) {
  testing::FakeDriver fake(256 * kMiB);
  fake.set_max_reservation(3 * kGiB);
  std::unique_ptr<ShimCore> core;
  ASSERT_EQ(MakeCore(&fake, 0, &core), CUDA_SUCCESS);
  EXPECT_EQ(core->va_bytes(), 2 * kGiB);
  CUdeviceptr p = 0;
  EXPECT_EQ(core->Alloc(&p, 4 * kMiB), CUDA_SUCCESS);
}

TEST(ShimCoreReservationTest, NoFallbackBelowWhatTheBudgetsNeed) {
  testing::FakeDriver fake(256 * kMiB);
  fake.set_max_reservation(512 * kMiB);  // below 3 x the device's memory
  std::unique_ptr<ShimCore> core;
  EXPECT_EQ(MakeCore(&fake, 0, &core), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(core, nullptr);
}

TEST(ShimCoreReservationTest, AnExplicitSizeIsAskedForOnce) {
  testing::FakeDriver fake(256 * kMiB);
  fake.set_max_reservation(3 * kGiB);
  std::unique_ptr<ShimCore> core;
  EXPECT_EQ(MakeCore(&fake, 4 * kGiB, &core), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(MakeCore(&fake, 1 * kGiB, &core), CUDA_SUCCESS);
  EXPECT_EQ(core->va_bytes(), 1 * kGiB);
}

TEST(ShimCoreReservationTest, AddressesPastEveryBlockAreRefusedNotPassedThrough) {
  testing::FakeDriver fake(256 * kMiB);
  std::unique_ptr<ShimCore> core;
  ASSERT_EQ(MakeCore(&fake, 0, &core), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(core->Alloc(&p, 4 * kMiB), CUDA_SUCCESS);
  const CUdeviceptr far = core->base() + core->va_bytes() - 4096;  // never materialized
  CUstream s = fake.CreateStream();
  ShimCore::Ticket ticket;
  MemRange range{far, 4096};
  EXPECT_EQ(core->BeforeAccess(&range, 1, s, false, /*synchronous=*/true, &ticket),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(core->Free(far), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace memvirt::shim

// Note [shared host budget]: the pools of several devices draw host slots from one ledger.
#include "shim/core/physical_pool.h"

#include "gtest/gtest.h"
#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

constexpr uint64_t kDeviceBytes = 64ull << 20;

TEST(PhysicalPoolTest, PoolsSharingALedgerShareOneHostBudget) {
  testing::FakeDriver fake(kDeviceBytes);
  HostLedger ledger;
  PhysicalPool a(&fake.driver(), 0, 0), b(&fake.driver(), 0, 0);
  a.ShareHostLedger(&ledger);
  b.ShareHostLedger(&ledger);
  ASSERT_EQ(a.Init(4, 4), CUDA_SUCCESS);
  ASSERT_EQ(b.Init(4, 8), CUDA_SUCCESS);
  EXPECT_EQ(ledger.limit(), 4u);  // the first pool's budget is the process's
  EXPECT_EQ(b.host_limit(), 4u);

  uint32_t slots_a[3], slot_b = 0, more = 0;
  for (uint32_t& s : slots_a) ASSERT_EQ(a.AcquireHost(&s), CUDA_SUCCESS);
  ASSERT_EQ(b.AcquireHost(&slot_b), CUDA_SUCCESS);
  EXPECT_EQ(b.AcquireHost(&more), CUDA_ERROR_OUT_OF_MEMORY);  // 4 in use in the process
  EXPECT_EQ(a.AcquireHost(&more), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(ledger.in_use(), 4u);

  a.ReleaseHost(slots_a[2]);  // cached by a: the process holds 4
  EXPECT_EQ(ledger.held(), 4u);
  ASSERT_EQ(b.AcquireHost(&more), CUDA_SUCCESS);  // b may use it
  EXPECT_EQ(ledger.in_use(), 4u);
  EXPECT_EQ(ledger.held(), 5u);  // b created one while a keeps one cached
  EXPECT_EQ(fake.host_bytes_in_use(), 5 * kChunkBytes);
  b.ReleaseHost(more);  // over the limit: its memory goes back at once
  EXPECT_EQ(ledger.held(), 4u);
  EXPECT_EQ(fake.host_bytes_in_use(), 4 * kChunkBytes);
  EXPECT_EQ(ledger.in_use(), 3u);
}

TEST(PhysicalPoolTest, ALowerSharedLimitIsOverForEveryPoolUntilTheyMoveOut) {
  testing::FakeDriver fake(kDeviceBytes);
  HostLedger ledger;
  PhysicalPool a(&fake.driver(), 0, 0), b(&fake.driver(), 0, 0);
  a.ShareHostLedger(&ledger);
  b.ShareHostLedger(&ledger);
  ASSERT_EQ(a.Init(4, 6), CUDA_SUCCESS);
  ASSERT_EQ(b.Init(4, 6), CUDA_SUCCESS);
  uint32_t sa[4], sb[2];
  for (uint32_t& s : sa) ASSERT_EQ(a.AcquireHost(&s), CUDA_SUCCESS);
  for (uint32_t& s : sb) ASSERT_EQ(b.AcquireHost(&s), CUDA_SUCCESS);

  a.SetHostLimit(3);  // the daemon's HOST_BUDGET, applied through one core
  EXPECT_EQ(ledger.over_limit(), 3u);
  EXPECT_EQ(a.host_over_limit(), 3u);
  EXPECT_EQ(b.host_over_limit(), 2u);      // at most its own
  for (uint32_t s : sb) b.ReleaseHost(s);  // b moves its chunks out first
  EXPECT_EQ(a.host_over_limit(), 1u);
  EXPECT_EQ(b.host_over_limit(), 0u);
  a.ReleaseHost(sa[3]);
  EXPECT_EQ(a.host_over_limit(), 0u);
  b.SetHostLimit(3);  // the same directive through the other core gives cached memory back
  a.SetHostLimit(3);
  EXPECT_LE(ledger.held(), 3u);
  EXPECT_LE(fake.host_bytes_in_use(), 3 * kChunkBytes);
}

}  // namespace
}  // namespace memvirt::shim

#include "capacity.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace memsim {
namespace {

TEST(SimLocalCapacity, RefusesChargesBeyondCapacityAndRecovers) {
  LocalCapacity c(1000);
  EXPECT_TRUE(c.TryCharge(600));
  EXPECT_FALSE(c.TryCharge(401));
  EXPECT_EQ(c.Used(), 600u);
  EXPECT_TRUE(c.TryCharge(400));
  EXPECT_FALSE(c.TryCharge(1));
  c.Release(500);
  EXPECT_TRUE(c.TryCharge(500));
  EXPECT_FALSE(c.TryCharge(UINT64_MAX));
}

TEST(SimLocalCapacity, ConcurrentChargesNeverExceedCapacity) {
  LocalCapacity c(10000);
  std::vector<std::thread> threads;
  std::atomic<int> granted{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        if (c.TryCharge(7)) granted.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(static_cast<uint64_t>(granted.load()) * 7, c.Used());
  EXPECT_LE(c.Used(), 10000u);
  EXPECT_EQ(granted.load(), 10000 / 7);
}

}  // namespace
}  // namespace memsim

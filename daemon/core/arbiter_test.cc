#include "daemon/core/arbiter.h"

#include <numeric>
#include <random>

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

uint64_t Sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), 0ull); }

TEST(ArbiterTest, EqualClaimsShareEqually) {
  const std::vector<ArbiterClaim> claims(3, ArbiterClaim{.demand_bytes = 1000});
  const auto b = ComputeBudgets(900, claims);
  EXPECT_EQ(b, (std::vector<uint64_t>{300, 300, 300}));
}

TEST(ArbiterTest, SmallDemandKeepsAllAndRestGoesToOthers) {
  const std::vector<ArbiterClaim> claims = {
      {.demand_bytes = 100}, {.demand_bytes = 1000}, {.demand_bytes = 1000}};
  const auto b = ComputeBudgets(900, claims);
  EXPECT_EQ(b[0], 100u);
  EXPECT_EQ(b[1], 400u);
  EXPECT_EQ(b[2], 400u);
}

TEST(ArbiterTest, EveryoneGetsDemandWhenItFits) {
  const std::vector<ArbiterClaim> claims = {{.demand_bytes = 100}, {.demand_bytes = 200}};
  EXPECT_EQ(ComputeBudgets(1000, claims), (std::vector<uint64_t>{100, 200}));
}

TEST(ArbiterTest, QuotaCapsBudget) {
  const std::vector<ArbiterClaim> claims = {{.demand_bytes = 1000, .quota_bytes = 50},
                                            {.demand_bytes = 1000}};
  const auto b = ComputeBudgets(600, claims);
  EXPECT_EQ(b[0], 50u);
  EXPECT_EQ(b[1], 550u);
}

TEST(ArbiterTest, FloorsAreHonouredWhenTheyFit) {
  const std::vector<ArbiterClaim> claims = {{.demand_bytes = 1000, .min_bytes = 700},
                                            {.demand_bytes = 1000}};
  const auto b = ComputeBudgets(1000, claims);
  EXPECT_EQ(b[0], 700u);
  EXPECT_EQ(b[1], 300u);
}

TEST(ArbiterTest, FloorsThatDoNotFitAreWaterFilled) {
  const std::vector<ArbiterClaim> claims = {
      {.min_bytes = 800}, {.min_bytes = 800}, {.min_bytes = 100}};
  const auto b = ComputeBudgets(1000, claims);
  EXPECT_EQ(b[2], 100u);
  EXPECT_EQ(b[0], 450u);
  EXPECT_EQ(b[1], 450u);
}

TEST(ArbiterTest, ZeroCapacityGivesZero) {
  const std::vector<ArbiterClaim> claims(2, ArbiterClaim{.demand_bytes = 5, .min_bytes = 5});
  EXPECT_EQ(ComputeBudgets(0, claims), (std::vector<uint64_t>{0, 0}));
  EXPECT_TRUE(ComputeBudgets(100, {}).empty());
}

TEST(ArbiterTest, UnlimitedDemandTakesEverything) {
  const std::vector<ArbiterClaim> claims = {{}};
  EXPECT_EQ(ComputeBudgets(12345, claims), (std::vector<uint64_t>{12345}));
}

// Property test over random claims: the invariants of Note [max-min fair budgets].
TEST(ArbiterTest, RandomClaimsKeepInvariants) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 2000; ++round) {
    const uint64_t capacity = rng() % (uint64_t{1} << (rng() % 45));
    std::vector<ArbiterClaim> claims(rng() % 9);
    for (auto& c : claims) {
      c.demand_bytes = rng() % 4 == 0 ? 0 : rng() % (uint64_t{1} << 40);
      c.min_bytes = rng() % 2 == 0 ? 0 : rng() % (uint64_t{1} << 38);
      if (c.demand_bytes != 0) c.min_bytes = std::min(c.min_bytes, c.demand_bytes);
      c.quota_bytes = rng() % 3 == 0 ? rng() % (uint64_t{1} << 39) : 0;
    }
    const auto b = ComputeBudgets(capacity, claims);
    ASSERT_EQ(b.size(), claims.size());
    ASSERT_LE(Sum(b), capacity) << "round " << round;
    uint64_t unmet = 0;
    for (size_t i = 0; i < b.size(); ++i) {
      uint64_t cap = claims[i].demand_bytes == 0 ? UINT64_MAX : claims[i].demand_bytes;
      if (claims[i].quota_bytes != 0) cap = std::min(cap, claims[i].quota_bytes);
      ASSERT_LE(b[i], cap);
      if (b[i] < cap) ++unmet;
    }
    // Work conservation: memory is left over only if everyone is at their cap, apart from
    // rounding (at most one byte per claim).
    if (unmet > 0) {
      ASSERT_GE(Sum(b) + claims.size(), capacity) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace memvirt::daemon

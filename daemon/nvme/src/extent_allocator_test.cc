#include "memvirt/nvme/extent_allocator.h"

#include <gtest/gtest.h>

#include <random>

namespace memvirt::nvme {
namespace {

constexpr TenantId kA = 1;
constexpr TenantId kB = 2;

TEST(ExtentAllocatorTest, FirstFitFromLowestAddress) {
  ExtentAllocator a({4, 4});
  auto r1 = a.Allocate(kA, 3);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(*r1, (std::vector<ExtentRun>{{0, 0, 3}}));
  auto r2 = a.Allocate(kA, 2);  // does not fit in file 0's remaining extent
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, (std::vector<ExtentRun>{{1, 0, 2}}));
  auto r3 = a.Allocate(kB, 1);  // first fit: file 0, extent 3
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(*r3, (std::vector<ExtentRun>{{0, 3, 1}}));
  EXPECT_EQ(a.OwnerOf(0, 3), kB);
  EXPECT_EQ(a.ExtentsOf(kA), 5u);
  EXPECT_EQ(a.ExtentsOf(kB), 1u);
}

TEST(ExtentAllocatorTest, ExhaustionIsResourceExhaustedAndChangesNothing) {
  ExtentAllocator a({2});
  ASSERT_TRUE(a.Allocate(kA, 2).ok());
  auto r = a.Allocate(kB, 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.stats().free_extents, 0u);
  EXPECT_EQ(a.ExtentsOf(kB), 0u);
}

TEST(ExtentAllocatorTest, RejectsZeroCountAndReservedTenant) {
  ExtentAllocator a({2});
  EXPECT_EQ(a.Allocate(kA, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Allocate(kNoTenant, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExtentAllocatorTest, FreeCoalescesNeighbours) {
  ExtentAllocator a({6});
  auto x = a.Allocate(kA, 2);
  auto y = a.Allocate(kA, 2);
  auto z = a.Allocate(kA, 2);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  ASSERT_TRUE(a.Free(kA, (*x)[0]).ok());
  ASSERT_TRUE(a.Free(kA, (*z)[0]).ok());
  EXPECT_EQ(a.stats().free_runs, 2u);
  EXPECT_EQ(a.stats().largest_free_run, 2u);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation, 0.5);
  ASSERT_TRUE(a.Free(kA, (*y)[0]).ok());
  const ExtentStats s = a.stats();
  EXPECT_EQ(s.free_runs, 1u);
  EXPECT_EQ(s.largest_free_run, 6u);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);
  auto all = a.Allocate(kB, 6);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
}

TEST(ExtentAllocatorTest, FragmentedSpaceIsCombinedFromLargestRuns) {
  ExtentAllocator a({8});
  std::vector<ExtentRun> singles;
  for (int i = 0; i < 8; ++i) singles.push_back((*a.Allocate(kA, 1))[0]);
  // Free 0, 2-3, 5-7: runs of 1, 2 and 3.
  for (int i : {0, 2, 3, 5, 6, 7}) ASSERT_TRUE(a.Free(kA, singles[i]).ok());
  auto r = a.Allocate(kB, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<ExtentRun>{{0, 2, 2}, {0, 5, 3}}));
  EXPECT_EQ(a.OwnerOf(0, 0), kNoTenant);
}

TEST(ExtentAllocatorTest, OnlyTheOwnerMayFreeOrWriteOrRead) {
  ExtentAllocator a({4});
  const ExtentRun run = (*a.Allocate(kA, 2))[0];
  EXPECT_EQ(a.Free(kB, run).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a.MarkWritten(kB, run).code(), absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(a.MarkWritten(kA, run).ok());
  EXPECT_TRUE(a.CheckReadable(kA, run).ok());
  EXPECT_EQ(a.CheckReadable(kB, run).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(a.CheckReadable(kA, {0, 1, 2}).code(), absl::StatusCode::kPermissionDenied)
      << "extent 2 is free";
  EXPECT_EQ(a.Free(kA, {0, 3, 2}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.ExtentsOf(kA), 2u);
}

TEST(ExtentAllocatorTest, ReallocatedExtentIsUnreadableUntilWrittenByNewOwner) {
  ExtentAllocator a({1});
  const ExtentRun run = (*a.Allocate(kA, 1))[0];
  ASSERT_TRUE(a.MarkWritten(kA, run).ok());
  ASSERT_TRUE(a.Free(kA, run).ok());
  const ExtentRun again = (*a.Allocate(kB, 1))[0];
  ASSERT_EQ(again, run);
  EXPECT_EQ(a.CheckReadable(kB, again).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a.MarkWritten(kB, again).ok());
  EXPECT_TRUE(a.CheckReadable(kB, again).ok());
}

TEST(ExtentAllocatorTest, FreeAllOfReleasesOnlyThatTenant) {
  ExtentAllocator a({10});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(a.Allocate(i % 2 ? kA : kB, 2).ok());
  }
  EXPECT_EQ(a.FreeAllOf(kA), 4u);
  EXPECT_EQ(a.FreeAllOf(kA), 0u);
  EXPECT_EQ(a.ExtentsOf(kA), 0u);
  EXPECT_EQ(a.ExtentsOf(kB), 6u);
  EXPECT_EQ(a.stats().free_extents, 4u);
  for (uint64_t e = 0; e < 10; ++e) EXPECT_NE(a.OwnerOf(0, e), kA);
}

// Randomized comparison with a per-extent reference model.
TEST(ExtentAllocatorTest, RandomizedAgainstReferenceModel) {
  const std::vector<uint64_t> sizes = {37, 1, 64, 20};
  ExtentAllocator a(sizes);
  std::vector<std::vector<TenantId>> model;
  for (uint64_t n : sizes) model.emplace_back(n, kNoTenant);
  std::vector<std::pair<TenantId, ExtentRun>> live;
  std::mt19937_64 rng(1234);

  auto model_free = [&] {
    uint64_t n = 0;
    for (const auto& f : model)
      for (TenantId t : f) n += t == kNoTenant;
    return n;
  };
  auto model_runs = [&](uint64_t* largest) {
    uint64_t runs = 0;
    *largest = 0;
    for (const auto& f : model) {
      uint64_t cur = 0;
      for (size_t i = 0; i <= f.size(); ++i) {
        if (i < f.size() && f[i] == kNoTenant) {
          ++cur;
        } else if (cur > 0) {
          ++runs;
          *largest = std::max(*largest, cur);
          cur = 0;
        }
      }
    }
    return runs;
  };
  // Lowest-addressed run with at least k free extents, or nullopt.
  auto model_first_fit = [&](uint64_t k) -> std::optional<ExtentRun> {
    for (int fi = 0; fi < static_cast<int>(model.size()); ++fi) {
      uint64_t cur = 0;
      for (uint64_t i = 0; i < model[fi].size(); ++i) {
        cur = model[fi][i] == kNoTenant ? cur + 1 : 0;
        if (cur == k) return ExtentRun{fi, i + 1 - k, k};
      }
    }
    return std::nullopt;
  };

  for (int step = 0; step < 4000; ++step) {
    const int action = static_cast<int>(rng() % 10);
    if (action < 5) {
      const TenantId t = 1 + rng() % 4;
      const uint64_t k = 1 + rng() % 12;
      const std::optional<ExtentRun> expected_single = model_first_fit(k);
      auto r = a.Allocate(t, k);
      if (k > model_free()) {
        ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.status();
      if (expected_single) {
        ASSERT_EQ(r->size(), 1u);
        ASSERT_EQ((*r)[0], *expected_single);
      }
      uint64_t got = 0;
      for (const ExtentRun& run : *r) {
        got += run.count;
        for (uint64_t e = run.first; e < run.first + run.count; ++e) {
          ASSERT_EQ(model[run.file_index][e], kNoTenant) << "double allocation";
          model[run.file_index][e] = t;
        }
        live.emplace_back(t, run);
      }
      ASSERT_EQ(got, k);
    } else if (action < 9 && !live.empty()) {
      const size_t i = rng() % live.size();
      const auto [t, run] = live[i];
      const TenantId wrong = t % 4 + 1;
      ASSERT_EQ(a.Free(wrong, run).code(), absl::StatusCode::kPermissionDenied);
      ASSERT_TRUE(a.Free(t, run).ok());
      for (uint64_t e = run.first; e < run.first + run.count; ++e)
        model[run.file_index][e] = kNoTenant;
      live.erase(live.begin() + i);
    } else {
      const TenantId t = 1 + rng() % 4;
      uint64_t expected = 0;
      for (auto& f : model)
        for (TenantId& o : f)
          if (o == t) {
            o = kNoTenant;
            ++expected;
          }
      ASSERT_EQ(a.FreeAllOf(t), expected);
      std::erase_if(live, [t](const auto& p) { return p.first == t; });
    }
    uint64_t largest = 0;
    const uint64_t runs = model_runs(&largest);
    const ExtentStats s = a.stats();
    ASSERT_EQ(s.free_extents, model_free());
    ASSERT_EQ(s.free_runs, runs) << "free neighbours not coalesced";
    ASSERT_EQ(s.largest_free_run, largest);
  }
}

}  // namespace
}  // namespace memvirt::nvme

// Tests of the adapter over the policy/ library (built with it only).
#include "shim/core/policy_library_adapter.h"

#include <gtest/gtest.h>

#include <vector>

namespace memvirt::shim {
namespace {

// Note [prefetch gate]: MayPrefetch() is false exactly while every live chunk
// is resident as the policy was told.
TEST(PolicyLibraryAdapterTest, MayPrefetchOnlyWhileALiveChunkIsNotResident) {
  auto p = MakePolicyLibraryAdapter("lifetime", 8);
  EXPECT_FALSE(p->MayPrefetch());
  p->OnAlloc(0);
  p->OnAlloc(1);
  EXPECT_TRUE(p->MayPrefetch());
  p->OnResident(0);
  EXPECT_TRUE(p->MayPrefetch());
  p->OnResident(1);
  EXPECT_FALSE(p->MayPrefetch());
  p->OnResident(1);  // repeated: no change
  EXPECT_FALSE(p->MayPrefetch());
  p->OnEvicted(1);
  EXPECT_TRUE(p->MayPrefetch());
  p->OnEvicted(1);
  p->OnResident(1);
  EXPECT_FALSE(p->MayPrefetch());
  p->OnEvicted(0);
  p->OnFree(0);  // a freed chunk is not a candidate
  EXPECT_FALSE(p->MayPrefetch());
  p->OnResident(0);  // events for freed chunks are ignored
  p->OnEvicted(0);
  EXPECT_FALSE(p->MayPrefetch());
  p->OnAlloc(0);  // reused chunk: not resident until told
  EXPECT_TRUE(p->MayPrefetch());
  p->OnResident(0);
  EXPECT_FALSE(p->MayPrefetch());
  p->OnAlloc(0);  // allocated again while resident: the policy restarts it
  EXPECT_TRUE(p->MayPrefetch());
}

// A learned schedule with an evicted chunk: candidates come through the
// caller's buffer (cleared first), and none once everything is resident.
TEST(PolicyLibraryAdapterTest, PrefetchCandidatesIntoReusesTheCallersBuffer) {
  auto p = MakePolicyLibraryAdapter("lifetime", 8);
  for (uint32_t c = 0; c < 3; ++c) {
    p->OnAlloc(c);
    p->OnResident(c);
  }
  p->OnBudgetChange(64ull << 20);
  uint64_t step = 0;
  for (int iteration = 0; iteration < 3; ++iteration) {
    for (uint32_t c = 0; c < 3; ++c) p->OnAccess(++step, &c, 1);
  }
  p->OnEvicted(1);  // needed two steps from now
  ASSERT_TRUE(p->MayPrefetch());
  std::vector<uint32_t> out = {7, 7, 7};
  p->PrefetchCandidatesInto(64ull << 20, &out);
  EXPECT_EQ(out, std::vector<uint32_t>{1});
  EXPECT_EQ(p->PrefetchCandidates(64ull << 20), out);
  p->OnResident(1);
  EXPECT_FALSE(p->MayPrefetch());
  p->PrefetchCandidatesInto(64ull << 20, &out);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace memvirt::shim

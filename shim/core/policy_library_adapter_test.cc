// Tests of the adapter over the policy/ library (built with it only).
#include "shim/core/policy_library_adapter.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "memvirt/policy/policy.h"
#include "shim/core/config.h"

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

bool AnyChunk(void*, uint32_t) { return true; }

// Note [deferred accesses]: a question asked right after accesses is answered
// with all of them known.
TEST(PolicyLibraryAdapterTest, VictimChoiceSeesDeferredAccesses) {
  auto p = MakePolicyLibraryAdapter("lru", 8);
  for (uint32_t c = 0; c < 3; ++c) {
    p->OnAlloc(c);
    p->OnResident(c);
  }
  uint64_t step = 0;
  for (uint32_t c : {0u, 1u, 2u, 0u}) p->OnAccess(++step, &c, 1);
  uint32_t victim = 99;
  ASSERT_TRUE(p->PickVictim(&AnyChunk, nullptr, &victim));
  EXPECT_EQ(victim, 1u);  // least recently accessed
  for (uint32_t c : {2u, 1u, 0u}) p->OnAccess(++step, &c, 1);
  ASSERT_TRUE(p->PickVictim(&AnyChunk, nullptr, &victim));
  EXPECT_EQ(victim, 2u);
}

// The adapter delivers the same calls as driving the library directly, so a
// learned lifetime schedule gives the same answers either way, also across
// more steps than the deferral log holds and with frees in between.
TEST(PolicyLibraryAdapterTest, DeferredAccessesGiveTheSameDecisionsAsDirectCalls) {
  constexpr uint32_t kChunks = 12;  // the pattern uses 0..10
  auto adapted = MakePolicyLibraryAdapter("lifetime", kChunks);
  std::unique_ptr<policy::Policy> direct = policy::MakeLifetimePolicy();
  auto alloc = [&](uint32_t c) {
    adapted->OnAlloc(c);
    adapted->OnResident(c);
    policy::BlockInfo info;
    info.bytes = kChunkBytes;
    direct->OnAlloc(c, info);
    direct->OnResident(c);
  };
  for (uint32_t c = 0; c < kChunks; ++c) alloc(c);
  adapted->OnBudgetChange(64ull << 20);
  direct->OnBudgetChange(64ull << 20);
  uint64_t step = 0;
  for (int iteration = 0; iteration < 12; ++iteration) {
    for (uint32_t c = 0; c < kChunks - 1; ++c) {
      const uint32_t pair[2] = {c, (c + 5) % (kChunks - 1)};
      adapted->OnAccess(++step, pair, 2);
      const policy::BlockAccess accesses[2] = {{pair[0], policy::AccessMode::kReadWrite},
                                               {pair[1], policy::AccessMode::kReadWrite}};
      direct->OnAccess(step, accesses);
    }
    if (iteration == 5) {  // a chunk outside the pattern freed and reused mid-run
      adapted->OnFree(kChunks - 1);
      direct->OnFree(kChunks - 1);
      alloc(kChunks - 1);
    }
  }
  const uint32_t evicted[3] = {1, 4, 9};
  for (uint32_t c : evicted) {
    adapted->OnEvicted(c);
    direct->OnEvicted(c);
  }
  for (uint32_t c : {0u, 1u}) {  // two more steps, no event in between: still deferred
    const uint32_t pair[2] = {c, c + 5};
    adapted->OnAccess(++step, pair, 2);
    const policy::BlockAccess accesses[2] = {{pair[0], policy::AccessMode::kReadWrite},
                                             {pair[1], policy::AccessMode::kReadWrite}};
    direct->OnAccess(step, accesses);
  }
  std::vector<uint32_t> expected;
  for (const policy::PrefetchRequest& r : direct->PrefetchCandidates(64ull << 20)) {
    expected.push_back(static_cast<uint32_t>(r.block));
  }
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(adapted->PrefetchCandidates(64ull << 20), expected);
  uint32_t victim = 99;
  ASSERT_TRUE(adapted->PickVictim(&AnyChunk, nullptr, &victim));
  const auto direct_victim = direct->PickVictim([](policy::BlockId) { return true; });
  ASSERT_TRUE(direct_victim.has_value());
  EXPECT_EQ(victim, *direct_victim);
}

}  // namespace
}  // namespace memvirt::shim

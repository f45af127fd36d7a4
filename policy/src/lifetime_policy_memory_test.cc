// Memory the lifetime policy allocates while it records, counted by
// replacing the global operator new in this test binary alone.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "memvirt/policy/policy.h"

namespace {
std::atomic<uint64_t> g_allocated_bytes{0};
}  // namespace

void* operator new(std::size_t n) {
  g_allocated_bytes.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// Out of line: inlined into a `delete` of memory from `new`, the call to
// free() draws GCC's -Wmismatched-new-delete (seen with -fsanitize=address).
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace memvirt::policy {
namespace {

// Note [recording layout]: a loop of period 1 is never adopted, so it stays
// on the learning path for good; its steps must not cost memory each (they
// once cost a copy of their accesses, up to max_iteration_steps of them).
TEST(LifetimePolicyMemoryTest, RepeatedStepRecordsNoCopyOfItsAccesses) {
  constexpr int kBlocks = 64;
  constexpr int kSteps = 1 << 14;
  auto p = MakeLifetimePolicy();
  std::vector<BlockAccess> accesses;
  for (BlockId b = 0; b < kBlocks; ++b) {
    p->OnAlloc(b, BlockInfo{1, BlockKind::kOther, false});
    accesses.push_back({b, AccessMode::kRead});
  }
  const uint64_t before = g_allocated_bytes.load();
  for (Step s = 0; s < kSteps; ++s) p->OnAccess(s, accesses);
  const uint64_t per_step = (g_allocated_bytes.load() - before) / kSteps;
  // A copy of the accesses alone would be kBlocks * sizeof(BlockAccess)
  // bytes per step.
  EXPECT_LT(per_step, 128u) << per_step << " bytes allocated per repeated step";
  // Nothing is learned: decisions stay LRU's.
  EXPECT_FALSE(p->NextUseDistance(0).has_value());
  p->OnResident(7);
  p->OnResident(3);
  EXPECT_EQ(p->PickVictim([](BlockId) { return true; }), 7u);
}

}  // namespace
}  // namespace memvirt::policy

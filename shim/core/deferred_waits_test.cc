// DeferredWaits: any() sees each kind of deferred wait; Take() moves all of
// them out and leaves nothing behind.
#include "shim/core/deferred_waits.h"

#include <gtest/gtest.h>

#include <functional>
#include <vector>

namespace memvirt::shim {
namespace {

TEST(DeferredWaitsTest, AnyKindOfWaitCounts) {
  const std::vector<std::function<void(DeferredWaits*)>> kinds = {
      [](DeferredWaits* w) {
        w->uses.push_back({1, 7});
      },
      [](DeferredWaits* w) { w->loads.push_back(3); },
      [](DeferredWaits* w) {
        w->demotion.moves.push_back({.chunk = 4, .slot = 0, .phys = 1, .stamp = 2});
      },
      [](DeferredWaits* w) { w->host_chunks = 2; },
      [](DeferredWaits* w) { w->peer_frees = true; },
      [](DeferredWaits* w) { w->demotion_wait = 0; },  // a count of 0 is a wait too
  };
  EXPECT_FALSE(DeferredWaits{}.any());
  for (size_t i = 0; i < kinds.size(); ++i) {
    DeferredWaits waits;
    kinds[i](&waits);
    EXPECT_TRUE(waits.any()) << i;
  }
}

TEST(DeferredWaitsTest, TakeMovesEverythingOut) {
  DeferredWaits waits;
  waits.uses.push_back({2, 9});
  waits.loads.push_back(5);
  waits.host_chunks = 8;
  waits.peer_frees = true;
  waits.demotion_wait = 11;
  const DeferredWaits taken = waits.Take();
  EXPECT_FALSE(waits.any());
  ASSERT_EQ(taken.uses.size(), 1u);
  EXPECT_EQ(taken.uses[0].stream, 2u);
  EXPECT_EQ(taken.uses[0].seq, 9u);
  EXPECT_EQ(taken.loads, std::vector<uint32_t>{5});
  EXPECT_EQ(taken.host_chunks, 8u);
  EXPECT_TRUE(taken.peer_frees);
  EXPECT_EQ(taken.demotion_wait, 11u);
}

}  // namespace
}  // namespace memvirt::shim

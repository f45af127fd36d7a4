#include "shim/core/stream_tracker.h"

#include <gtest/gtest.h>

#include <thread>

#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

TEST(StreamTrackerTest, CompletionFollowsTheDevice) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 4);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  fake.Hold(s);
  const uint64_t seq = tracker.Issue(idx);
  EXPECT_FALSE(tracker.IsComplete(idx, seq));  // no event covers it yet
  CUevent ev = nullptr;
  ASSERT_EQ(tracker.Cover(idx, seq, &ev), CUDA_SUCCESS);
  ASSERT_NE(ev, nullptr);
  EXPECT_FALSE(tracker.IsComplete(idx, seq));  // covered, but the stream is held
  fake.Release(s);
  EXPECT_TRUE(tracker.IsComplete(idx, seq));
}

TEST(StreamTrackerTest, EventsAreBatched) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 8);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  for (int i = 0; i < 80; ++i) tracker.Issue(idx);
  EXPECT_LE(tracker.events_recorded(), 10u);
  EXPECT_GE(tracker.events_recorded(), 9u);
  EXPECT_TRUE(tracker.IsComplete(idx, 72));
  EXPECT_FALSE(tracker.IsComplete(idx, 80));  // the tail is not covered yet
  EXPECT_EQ(tracker.WaitFor(idx, 80), CUDA_SUCCESS);
  EXPECT_TRUE(tracker.IsComplete(idx, 80));
}

TEST(StreamTrackerTest, HandlesMapToStableIndicesAndRetire) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 4);
  CUstream a = fake.CreateStream();
  CUstream b = fake.CreateStream();
  const uint32_t ia = tracker.IndexOf(a, false);
  EXPECT_NE(ia, tracker.IndexOf(b, false));
  EXPECT_EQ(ia, tracker.IndexOf(a, false));
  EXPECT_EQ(tracker.IndexOf(nullptr, false), tracker.IndexOf(CU_STREAM_LEGACY, false));
  EXPECT_EQ(tracker.IndexOf(nullptr, true), tracker.IndexOf(CU_STREAM_PER_THREAD, false));
  EXPECT_NE(tracker.IndexOf(nullptr, true), tracker.IndexOf(nullptr, false));
  fake.Hold(a);
  const uint64_t seq = tracker.Issue(ia);
  tracker.Retire(a, false);
  EXPECT_NE(tracker.IndexOf(a, false), ia);  // reused handle, fresh state
  EXPECT_FALSE(tracker.IsComplete(ia, seq));
  fake.Release(a);
  EXPECT_TRUE(tracker.IsComplete(ia, seq));
}

TEST(StreamTrackerTest, PerThreadStreamsAreDistinctPerThread) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 4);
  const uint32_t mine = tracker.IndexOf(CU_STREAM_PER_THREAD, false);
  uint32_t theirs = mine;
  std::thread t([&] { theirs = tracker.IndexOf(CU_STREAM_PER_THREAD, false); });
  t.join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(mine, tracker.IndexOf(nullptr, true));
}

}  // namespace
}  // namespace memvirt::shim

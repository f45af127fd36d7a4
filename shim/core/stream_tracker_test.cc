#include "shim/core/stream_tracker.h"

#include <gtest/gtest.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <future>
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

// Note [completion is CUDA_SUCCESS]
TEST(StreamTrackerTest, OnlySuccessfulQueriesMeanComplete) {
  testing::FakeDriver fake(64 << 20);
  testing::FaultInjector faults(fake.driver());
  StreamTracker tracker(&faults.driver(), 4);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  const uint64_t seq = tracker.Issue(idx);
  CUevent ev = nullptr;
  ASSERT_EQ(tracker.Cover(idx, seq, &ev), CUDA_SUCCESS);
  ASSERT_NE(ev, nullptr);
  faults.FailEventQuery(2);
  EXPECT_FALSE(tracker.IsComplete(idx, seq));  // the work ran, but the driver did not say so
  EXPECT_EQ(tracker.WaitFor(idx, seq), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_TRUE(tracker.IsComplete(idx, seq));  // the next query succeeds
  EXPECT_EQ(tracker.WaitFor(idx, seq), CUDA_SUCCESS);
}

// Note [held events]: a held event is not recorded again for later work
// while the hold is out, even once it is known complete.
TEST(StreamTrackerTest, HeldEventsAreNotReusedUntilUnheld) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 1000);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  fake.Hold(s);
  const uint64_t first = tracker.Issue(idx);
  CUevent held = nullptr;
  WindowWait window;
  ASSERT_EQ(tracker.Hold(idx, first, &held, &window), CUDA_SUCCESS);
  ASSERT_NE(held, nullptr);
  fake.Release(s);
  EXPECT_TRUE(tracker.IsComplete(idx, first));  // polled: the event is done with
  const uint64_t second = tracker.Issue(idx);
  CUevent next = nullptr;
  ASSERT_EQ(tracker.Cover(idx, second, &next), CUDA_SUCCESS);
  EXPECT_NE(next, held) << "a held event was recorded again";
  ASSERT_EQ(tracker.WaitFor(idx, second), CUDA_SUCCESS);
  tracker.Unhold(1);
  // Both completed events are reusable now: the next record takes one.
  const uint64_t third = tracker.Issue(idx);
  CUevent reused = nullptr;
  ASSERT_EQ(tracker.Cover(idx, third, &reused), CUDA_SUCCESS);
  EXPECT_TRUE(reused == held || reused == next);
  // Nothing to hold for completed work.
  ASSERT_EQ(tracker.WaitFor(idx, third), CUDA_SUCCESS);
  CUevent none = held;
  ASSERT_EQ(tracker.Hold(idx, third, &none, &window), CUDA_SUCCESS);
  EXPECT_EQ(none, nullptr);
}

TEST(StreamTrackerTest, FailedHostWaitLeavesWorkNotComplete) {
  testing::FakeDriver fake(64 << 20);
  testing::FaultInjector faults(fake.driver());
  StreamTracker tracker(&faults.driver(), 4);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  fake.Hold(s);
  const uint64_t seq = tracker.Issue(idx);
  faults.FailEventSynchronize(1);
  EXPECT_EQ(tracker.WaitFor(idx, seq), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_FALSE(tracker.IsComplete(idx, seq));
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

// Note [enqueue window]: batched events wait while a window is open; a window
// closes exactly once, when its last holder goes (a double close would keep
// the window counts apart, and batching off, for good).
TEST(StreamTrackerTest, EnqueueWindowClosesOnceWhenItsHolderGoes) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 4);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  {
    EnqueueWindow holder;
    EXPECT_FALSE(holder.open());
    {
      EnqueueWindow opened = tracker.BeginEnqueue(idx);
      EXPECT_TRUE(opened.open());
      holder = std::move(opened);
      EXPECT_FALSE(opened.open());
    }  // the moved-from window closes nothing
    EXPECT_TRUE(holder.open());
    for (int i = 0; i < 8; ++i) tracker.Issue(idx);
    EXPECT_EQ(tracker.events_recorded(), 0u);
  }
  tracker.Issue(idx);
  EXPECT_EQ(tracker.events_recorded(), 1u);
  EnqueueWindow closed_early = tracker.BeginEnqueue(idx);
  closed_early.Close();
  EXPECT_FALSE(closed_early.open());
  for (int i = 0; i < 4; ++i) tracker.Issue(idx);
  EXPECT_EQ(tracker.events_recorded(), 2u);
}

// Note [enqueue window]: CoverAll() never waits for a window to close (it
// used to yield for as long as the holder's driver call ran); it covers the
// other streams and leaves that one for later.
TEST(StreamTrackerTest, CoverAllSkipsAStreamWhoseEnqueueWindowIsOpen) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 1000);
  const uint32_t a = tracker.IndexOf(fake.CreateStream(), false);
  const uint32_t b = tracker.IndexOf(fake.CreateStream(), false);
  EnqueueWindow open = tracker.BeginEnqueue(a);
  const uint64_t on_a = tracker.Issue(a);
  const uint64_t on_b = tracker.Issue(b);
  std::future<void> covered = std::async(std::launch::async, [&] { tracker.CoverAll(); });
  const bool returned_while_open =
      covered.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  open.Close();  // lets a waiting CoverAll() end
  covered.get();
  EXPECT_TRUE(returned_while_open);
  EXPECT_EQ(tracker.events_recorded(), 1u) << "only b covered";
  EXPECT_TRUE(tracker.IsComplete(b, on_b));
  EXPECT_FALSE(tracker.IsComplete(a, on_a)) << "a is not covered yet";
  tracker.CoverAll();  // closed now
  EXPECT_TRUE(tracker.IsComplete(a, on_a));
}

// Hold() hands out the wait for an open window instead of yielding for it;
// once the window closes the wait ends and Hold() covers the work.
TEST(StreamTrackerTest, HoldReturnsTheWaitForAnOpenEnqueueWindow) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 1000);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  fake.Hold(s);
  EnqueueWindow open = tracker.BeginEnqueue(idx);
  const uint64_t seq = tracker.Issue(idx);
  CUevent event = nullptr;
  WindowWait window;
  EXPECT_FALSE(window.pending());
  ASSERT_EQ(tracker.Hold(idx, seq, &event, &window), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(event, nullptr);
  ASSERT_TRUE(window.pending());
  EXPECT_EQ(tracker.events_recorded(), 0u) << "nothing recorded while the window is open";
  // A window opened after the wait was taken is not waited for.
  EnqueueWindow later = tracker.BeginEnqueue(idx);
  std::thread closer([&] { open.Close(); });  // the holder's driver call returns elsewhere
  window.Wait();
  closer.join();
  later.Close();
  ASSERT_EQ(tracker.Hold(idx, seq, &event, &window), CUDA_SUCCESS);
  ASSERT_NE(event, nullptr);
  fake.Release(s);
  ASSERT_EQ(tracker.WaitFor(idx, seq), CUDA_SUCCESS);
  tracker.Unhold(1);
}

// Note [window waits]: a thread waiting for another thread's enqueue window
// sleeps until the window closes, without the owner's lock (WindowWait) or
// with it (WaitFor records on demand), instead of yielding in a loop.
TEST(StreamTrackerTest, WindowWaitsSleepUntilTheWindowCloses) {
  testing::FakeDriver fake(64 << 20);
  StreamTracker tracker(&fake.driver(), 1000);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  auto thread_cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  for (const bool owner_waits : {false, true}) {
    SCOPED_TRACE(owner_waits ? "WaitFor" : "WindowWait");
    EnqueueWindow open = tracker.BeginEnqueue(idx);
    const uint64_t seq = tracker.Issue(idx);
    CUevent event = nullptr;
    WindowWait window;
    ASSERT_EQ(tracker.Hold(idx, seq, &event, &window), CUDA_ERROR_NOT_READY);
    std::atomic<bool> closed{false};
    int64_t waiter_cpu_ns = 0;
    std::thread waiter([&] {
      const int64_t start = thread_cpu_ns();
      if (owner_waits) {
        EXPECT_EQ(tracker.WaitFor(idx, seq), CUDA_SUCCESS);
      } else {
        window.Wait();
      }
      waiter_cpu_ns = thread_cpu_ns() - start;
      EXPECT_TRUE(closed.load()) << "the wait ended while the window was open";
    });
    // The holder's driver call runs (a synchronous copy), then returns.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    closed = true;
    open.Close();
    waiter.join();
    EXPECT_LT(waiter_cpu_ns, 20'000'000) << "the waiter spun while the window was open";
  }
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

// A clock for the pacing tests: every reading costs kReadNs of simulated time,
// so a batched event (two readings around poll + record) measures kReadNs.
constexpr int64_t kReadNs = 1000;
int64_t g_fake_now = 0;
int64_t FakeNow() {
  g_fake_now += kReadNs;
  return g_fake_now;
}

TEST(StreamTrackerTest, PacedEventsTakeABoundedShareOfTime) {
  testing::FakeDriver fake(64 << 20);
  g_fake_now = 0;
  constexpr uint32_t kPace = 10;
  StreamTracker tracker(&fake.driver(), 4, kPace, &FakeNow);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  constexpr int kOps = 20000;
  for (int i = 0; i < kOps; ++i) {
    tracker.Issue(idx);
    g_fake_now += 50;  // back-to-back launches, 50 ns apart
  }
  // The measured cost of a batched event is one clock reading; the interval
  // is kPace times its moving average.
  EXPECT_GE(tracker.event_interval_ns(), kPace * kReadNs * 9 / 10);
  EXPECT_LE(tracker.event_interval_ns(), kPace * kReadNs);
  // Unpaced, there would be kOps / 4 = 5000 events; paced, at most one per
  // interval of simulated time (plus the first ones, while the average of the
  // cost still grows from 0).
  const uint64_t elapsed = static_cast<uint64_t>(g_fake_now);
  EXPECT_LE(tracker.events_recorded(), elapsed / (kPace * kReadNs * 9 / 10) + 30);
  EXPECT_GE(tracker.events_recorded(), elapsed / (kPace * kReadNs + 4 * (50 + kReadNs)) - 1);
  // Completion stays available on demand.
  EXPECT_FALSE(tracker.IsComplete(idx, kOps));
  EXPECT_EQ(tracker.WaitFor(idx, kOps), CUDA_SUCCESS);
  EXPECT_TRUE(tracker.IsComplete(idx, kOps));
}

TEST(StreamTrackerTest, PacedIntervalIsCapped) {
  testing::FakeDriver fake(64 << 20);
  g_fake_now = 0;
  StreamTracker tracker(&fake.driver(), 1, 1u << 16, &FakeNow);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  for (int i = 0; i < 200; ++i) tracker.Issue(idx);
  EXPECT_EQ(tracker.event_interval_ns(), StreamTracker::kMaxEventIntervalNs);
  // Once the interval has passed, the next batch records again.
  const uint64_t before = tracker.events_recorded();
  g_fake_now += StreamTracker::kMaxEventIntervalNs;
  tracker.Issue(idx);
  tracker.Issue(idx);
  EXPECT_EQ(tracker.events_recorded(), before + 1);
}

TEST(StreamTrackerTest, UnpacedTrackerNeverReadsTheClock) {
  testing::FakeDriver fake(64 << 20);
  g_fake_now = 0;
  StreamTracker tracker(&fake.driver(), 4, 0, &FakeNow);
  CUstream s = fake.CreateStream();
  const uint32_t idx = tracker.IndexOf(s, false);
  for (int i = 0; i < 80; ++i) tracker.Issue(idx);
  EXPECT_EQ(g_fake_now, 0);
  EXPECT_EQ(tracker.event_interval_ns(), 0);
  EXPECT_GE(tracker.events_recorded(), 19u);
}

}  // namespace
}  // namespace memvirt::shim

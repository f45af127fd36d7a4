#include "daemon/server/pid_watcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

pid_t SpawnSleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

TEST(PidWatcherTest, ReportsExitOfWatchedProcess) {
  std::atomic<uint64_t> reported{0};
  PidWatcher w([&](uint64_t key) { reported = key; });
  const pid_t pid = SpawnSleeper();
  ASSERT_TRUE(w.Watch(7, pid).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(reported.load(), 0u) << "reported before the process exited";
  kill(pid, SIGKILL);
  for (int i = 0; i < 500 && reported.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(reported.load(), 7u);
  waitpid(pid, nullptr, 0);
}

TEST(PidWatcherTest, UnwatchedProcessIsNotReported) {
  std::atomic<int> calls{0};
  PidWatcher w([&](uint64_t) { ++calls; });
  const pid_t pid = SpawnSleeper();
  ASSERT_TRUE(w.Watch(1, pid).ok());
  w.Unwatch(1);
  w.Unwatch(99);  // Unknown: ignored.
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(calls.load(), 0);
}

TEST(PidWatcherTest, NonexistentPidFails) {
  PidWatcher w([](uint64_t) {});
  EXPECT_FALSE(w.Watch(1, 0x3ffffff0).ok());
}

}  // namespace
}  // namespace memvirt::daemon

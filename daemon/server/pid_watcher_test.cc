#include "daemon/server/pid_watcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

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

// The keys a watcher reported, in order; waits for one without a time bound that decides
// anything.
class Reports {
 public:
  PidWatcher::Callback callback() {
    return [this](uint64_t key) {
      std::lock_guard<std::mutex> lock(mu_);
      keys_.push_back(key);
      cv_.notify_all();
    };
  }
  // False only if `key` is not reported within a minute (a hang).
  bool WaitFor(uint64_t key) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::minutes(1),
                        [&] { return std::find(keys_.begin(), keys_.end(), key) != keys_.end(); });
  }
  std::vector<uint64_t> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> keys_;
};

// Exits are reported when they happen: a process killed later is reported after one killed
// first, and a live one not at all (its pidfd is watched the same way, so it would have been
// reported with the other's exit had it been ready).
TEST(PidWatcherTest, ReportsExitOfWatchedProcess) {
  Reports reports;
  const pid_t live = SpawnSleeper();
  const pid_t dying = SpawnSleeper();
  {
    PidWatcher w(reports.callback());
    ASSERT_TRUE(w.Watch(7, live).ok());
    ASSERT_TRUE(w.Watch(8, dying).ok());
    kill(dying, SIGKILL);
    ASSERT_TRUE(reports.WaitFor(8));
    waitpid(dying, nullptr, 0);
    EXPECT_EQ(reports.keys(), std::vector<uint64_t>{8}) << "reported before the process exited";
    kill(live, SIGKILL);
    ASSERT_TRUE(reports.WaitFor(7));
  }  // joins the watcher's thread: no report after this
  EXPECT_EQ(reports.keys(), (std::vector<uint64_t>{8, 7}));
  waitpid(live, nullptr, 0);
}

// An unwatched process's exit is never reported: a watched one that exits after it is, and
// once the watcher is gone (its thread joined) nothing else was.
TEST(PidWatcherTest, UnwatchedProcessIsNotReported) {
  Reports reports;
  const pid_t unwatched = SpawnSleeper();
  const pid_t watched = SpawnSleeper();
  {
    PidWatcher w(reports.callback());
    ASSERT_TRUE(w.Watch(1, unwatched).ok());
    w.Unwatch(1);
    w.Unwatch(99);  // Unknown: ignored.
    kill(unwatched, SIGKILL);
    waitpid(unwatched, nullptr, 0);
    ASSERT_TRUE(w.Watch(2, watched).ok());
    kill(watched, SIGKILL);
    ASSERT_TRUE(reports.WaitFor(2));
  }
  EXPECT_EQ(reports.keys(), std::vector<uint64_t>{2});
  waitpid(watched, nullptr, 0);
}

TEST(PidWatcherTest, NonexistentPidFails) {
  PidWatcher w([](uint64_t) {});
  EXPECT_FALSE(w.Watch(1, 0x3ffffff0).ok());
}

}  // namespace
}  // namespace memvirt::daemon

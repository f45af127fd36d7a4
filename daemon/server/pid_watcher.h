// PidWatcher: tells when a registered process exits, even if its socket stays open.
//
// Note [pidfd]
// A client stream normally ends when the client's socket closes, which the kernel does when the
// process dies. But a child forked after the connection was made inherits the socket and keeps
// it open, so the daemon would not notice that the registered process is gone. A pidfd
// (pidfd_open(2), Linux >= 5.3) becomes readable when the process exits; one thread polls all
// of them and reports exits. On kernels without pidfd_open, Watch() fails and the daemon
// relies on the socket alone.
//
// Thread safety: all methods are thread-safe. The callback runs on the watcher's thread, with
// no lock held.
#ifndef MEMVIRT_DAEMON_SERVER_PID_WATCHER_H_
#define MEMVIRT_DAEMON_SERVER_PID_WATCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace memvirt::daemon {

class PidWatcher {
 public:
  using Callback = std::function<void(uint64_t key)>;
  explicit PidWatcher(Callback on_exit);
  ~PidWatcher();
  PidWatcher(const PidWatcher&) = delete;
  PidWatcher& operator=(const PidWatcher&) = delete;

  // Reports `key` once `pid` has exited (at once if it already has).
  absl::Status Watch(uint64_t key, pid_t pid);
  // Stops watching `key`; unknown keys are ignored.
  void Unwatch(uint64_t key);

 private:
  void Loop();

  const Callback on_exit_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, int> pidfds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_PID_WATCHER_H_

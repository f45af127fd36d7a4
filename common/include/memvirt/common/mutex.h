// Clang thread-safety annotations (no-ops on other compilers) and a std::mutex,
// scoped lock and condition variable that carry them.
//
// Thread safety: Mutex is a plain exclusive lock; MutexLock holds one for a
// scope; CondVar waits release and re-take the Mutex the caller holds.
//
// Note [annotated std::mutex]
//   The shim is LD_PRELOADed into arbitrary programs, some of which ship
//   their own (different) Abseil, so the shim and the client library it
//   loads use the standard library's mutex rather than absl::Mutex; that
//   also keeps every edge visible to ThreadSanitizer (Note [tsan and absl] in
//   daemon/core/mutex_lock.h). These macros mirror ABSL_GUARDED_BY & co., so
//   the contracts read as in daemon/ and a build with
//   -DMEMVIRT_THREAD_SAFETY=ON (clang -Wthread-safety) checks them.
//   A lambda is analysed as a function of its own: one that reads guarded
//   state says so (`[&]() MEMVIRT_REQUIRES(mu_) {...}`), and the analysis
//   then checks its callers. A predicate called from inside a wait cannot be
//   checked that way, so CondVar takes none: callers loop on their condition
//   in the locked scope.
#ifndef MEMVIRT_COMMON_MUTEX_H_
#define MEMVIRT_COMMON_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define MEMVIRT_TSA(x) __attribute__((x))
#else
#define MEMVIRT_TSA(x)
#endif

#define MEMVIRT_CAPABILITY(x) MEMVIRT_TSA(capability(x))
#define MEMVIRT_GUARDED_BY(x) MEMVIRT_TSA(guarded_by(x))
#define MEMVIRT_PT_GUARDED_BY(x) MEMVIRT_TSA(pt_guarded_by(x))
#define MEMVIRT_REQUIRES(...) MEMVIRT_TSA(requires_capability(__VA_ARGS__))
#define MEMVIRT_EXCLUDES(...) MEMVIRT_TSA(locks_excluded(__VA_ARGS__))
#define MEMVIRT_ACQUIRE(...) MEMVIRT_TSA(acquire_capability(__VA_ARGS__))
#define MEMVIRT_RELEASE(...) MEMVIRT_TSA(release_capability(__VA_ARGS__))
#define MEMVIRT_ASSERT_CAPABILITY(x) MEMVIRT_TSA(assert_capability(x))
#define MEMVIRT_ACQUIRED_BEFORE(...) MEMVIRT_TSA(acquired_before(__VA_ARGS__))
#define MEMVIRT_SCOPED_CAPABILITY MEMVIRT_TSA(scoped_lockable)

namespace memvirt::sync {

class CondVar;

class MEMVIRT_CAPABILITY("mutex") Mutex {
 public:
  void Lock() MEMVIRT_ACQUIRE() { mu_.lock(); }
  void Unlock() MEMVIRT_RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds this mutex where it cannot see
  // it (a callback called only from a locked scope). Not checked at run time.
  void AssertHeld() const MEMVIRT_ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

class MEMVIRT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) MEMVIRT_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() MEMVIRT_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Waits release `mu` and hold it again when they return; wake-ups may be
// spurious, so callers loop on their condition.
class CondVar {
 public:
  void Wait(Mutex* mu) MEMVIRT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's scope unlocks it
  }
  // False if `deadline` passed.
  template <typename Clock, typename Duration>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline)
      MEMVIRT_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

}  // namespace memvirt::sync

#endif  // MEMVIRT_COMMON_MUTEX_H_

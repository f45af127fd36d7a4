// MutexLock: a scoped lock on an absl::Mutex that ThreadSanitizer can see.
//
// Note [tsan and absl]
// The distribution's abseil is built without ThreadSanitizer, so TSan sees none of the
// happens-before edges that absl::Mutex creates and reports races on every field it guards.
// In TSan builds this guard adds the acquire/release edges itself (on the mutex's address);
// in other builds it is exactly absl::MutexLock. Use it instead of absl::MutexLock in daemon
// code. Clang's -Wthread-safety analysis treats both the same way.
//
// Thread safety: as absl::MutexLock.
#ifndef MEMVIRT_DAEMON_CORE_MUTEX_LOCK_H_
#define MEMVIRT_DAEMON_CORE_MUTEX_LOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#if defined(__SANITIZE_THREAD__)
#define MEMVIRT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MEMVIRT_TSAN 1
#endif
#endif

#ifdef MEMVIRT_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace memvirt::daemon {

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
#ifdef MEMVIRT_TSAN
    __tsan_acquire(mu_);
#endif
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
#ifdef MEMVIRT_TSAN
    __tsan_release(mu_);
#endif
    mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  absl::Mutex* const mu_;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_MUTEX_LOCK_H_

// Clang thread-safety annotations (no-ops on other compilers) and a std::mutex
// that carries them.
//
// Thread safety: Mutex is a plain exclusive lock; MutexLock is a scoped holder.
//
// Note [no absl in the shim]
//   libmemshim.so is LD_PRELOADed into arbitrary programs, some of which ship
//   their own (different) Abseil. The shim therefore depends only on libc and
//   libstdc++; these macros mirror ABSL_GUARDED_BY & co. so the contracts read
//   the same as in daemon/ and are checked when built with clang.
#ifndef MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_
#define MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_

#include <mutex>

#if defined(__clang__)
#define MEMSHIM_TSA(x) __attribute__((x))
#else
#define MEMSHIM_TSA(x)
#endif

#define MEMSHIM_CAPABILITY(x) MEMSHIM_TSA(capability(x))
#define MEMSHIM_GUARDED_BY(x) MEMSHIM_TSA(guarded_by(x))
#define MEMSHIM_REQUIRES(...) MEMSHIM_TSA(requires_capability(__VA_ARGS__))
#define MEMSHIM_EXCLUDES(...) MEMSHIM_TSA(locks_excluded(__VA_ARGS__))
#define MEMSHIM_ACQUIRE(...) MEMSHIM_TSA(acquire_capability(__VA_ARGS__))
#define MEMSHIM_RELEASE(...) MEMSHIM_TSA(release_capability(__VA_ARGS__))
#define MEMSHIM_SCOPED_CAPABILITY MEMSHIM_TSA(scoped_lockable)

namespace memvirt::shim {

class MEMSHIM_CAPABILITY("mutex") Mutex {
 public:
  void Lock() MEMSHIM_ACQUIRE() { mu_.lock(); }
  void Unlock() MEMSHIM_RELEASE() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

class MEMSHIM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) MEMSHIM_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() MEMSHIM_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_

// The shim's names for the annotated std::mutex of memvirt/common/mutex.h
// (Note [annotated std::mutex] there: no Abseil in the shim).
//
// Thread safety: as memvirt::sync::Mutex, MutexLock and CondVar.
#ifndef MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_
#define MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_

#include "memvirt/common/mutex.h"

#define MEMSHIM_GUARDED_BY(x) MEMVIRT_GUARDED_BY(x)
#define MEMSHIM_REQUIRES(...) MEMVIRT_REQUIRES(__VA_ARGS__)
#define MEMSHIM_EXCLUDES(...) MEMVIRT_EXCLUDES(__VA_ARGS__)

namespace memvirt::shim {

using sync::CondVar;
using sync::Mutex;
using sync::MutexLock;

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_THREAD_ANNOTATIONS_H_

// Turns memory faults raised inside simulated device work into an error value.
//
// Note [illegal address]: a real GPU reports a kernel's access to unmapped memory as the sticky
// CUDA_ERROR_ILLEGAL_ADDRESS instead of killing the process. The sim runs kernels and copy
// engines as host code on stream worker threads, so such an access raises SIGSEGV (PROT_NONE
// page) or SIGBUS on that thread. InstallFaultHandler() installs one process-wide handler,
// chained to whatever handler was installed before (including a sanitizer's): if the faulting
// thread is inside RunGuarded(), the handler siglongjmp's back to it; otherwise the previous
// handler gets the signal unchanged, so faults outside device work behave as without the sim.
//
// Thread safety: InstallFaultHandler() is idempotent and thread-safe. RunGuarded() uses only
// per-thread state.
#ifndef MEMSIM_SRC_FAULT_GUARD_H_
#define MEMSIM_SRC_FAULT_GUARD_H_

namespace memsim {

void InstallFaultHandler();

// Runs fn(arg). Returns false if it faulted (the work was abandoned at the faulting access).
// REQUIRES: fn holds no locks and owns no objects with destructors at the point where it may
// fault (its frames are discarded by siglongjmp).
bool RunGuarded(void (*fn)(void*), void* arg);

// Convenience for lambdas: RunGuarded on a callable (invoked by reference).
template <typename F>
bool RunGuardedCall(F& f) {
  return RunGuarded([](void* p) { (*static_cast<F*>(p))(); }, &f);
}

}  // namespace memsim

#endif  // MEMSIM_SRC_FAULT_GUARD_H_

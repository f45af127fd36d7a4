#include "fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <cstring>
#include <mutex>

namespace memsim {

namespace {

// Initial-exec TLS: the signal handler must not allocate TLS lazily.
__attribute__((tls_model("initial-exec"))) thread_local sigjmp_buf* t_guard = nullptr;

struct sigaction g_prev_segv;
struct sigaction g_prev_bus;

void Chain(const struct sigaction& prev, int sig, siginfo_t* info, void* uctx) {
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default disposition: restore it; returning re-executes the access and the kernel's
  // default action (core dump) applies to the original fault.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
}

void OnFault(int sig, siginfo_t* info, void* uctx) {
  sigjmp_buf* guard = t_guard;
  if (guard != nullptr) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);
  }
  Chain(sig == SIGSEGV ? g_prev_segv : g_prev_bus, sig, info, uctx);
}

}  // namespace

void InstallFaultHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnFault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

bool RunGuarded(void (*fn)(void*), void* arg) {
  sigjmp_buf env;
  sigjmp_buf* const outer = t_guard;
  if (sigsetjmp(env, 1) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &env;
  fn(arg);
  t_guard = outer;
  return true;
}

}  // namespace memsim

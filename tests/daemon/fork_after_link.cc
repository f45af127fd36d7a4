// A CUDA program that forks after its first allocation (so the shim's daemon link is running)
// and lets the child leave through exit(), as programs that fork helpers do. The child must
// exit promptly and cleanly: it inherits none of the link's threads.
//
// Usage: fork_after_link   Prints "child_status N" and "parent_done"; exit 0 on success.
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tests/shim/cuda_check.h"

int main() {
  SetUpPrimaryContext();
  CUdeviceptr p;
  CHECK_CU(cuMemAlloc(&p, 4 << 20));
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    alarm(10);  // a hang in the exit path is a failure, not a stuck test
    std::exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 1;
  std::printf("child_status %d\n",
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  CHECK_CU(cuMemFree(p));
  std::printf("parent_done\n");
  return 0;
}

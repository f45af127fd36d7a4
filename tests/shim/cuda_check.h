// Tiny helpers for the integration programs: check a driver call, exit with
// a distinct code on out-of-memory so the harness can tell OOM from bugs.
#ifndef MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_
#define MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_

#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

inline constexpr int kExitOutOfMemory = 3;

#define CHECK_CU(call)                                                          \
  do {                                                                          \
    CUresult check_cu_result = (call);                                          \
    if (check_cu_result != CUDA_SUCCESS) {                                      \
      std::fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(check_cu_result));                          \
      if (check_cu_result == CUDA_ERROR_OUT_OF_MEMORY) {                        \
        std::printf("OOM\n");                                                   \
        std::exit(kExitOutOfMemory);                                            \
      }                                                                         \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

// cuInit, then makes device 0's primary context current; returns it.
inline CUcontext SetUpPrimaryContext() {
  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  return ctx;
}

// cuInit, then retains every device's primary context (none made current);
// exits with 1 if there are fewer than `at_least` devices.
inline std::vector<CUcontext> RetainPrimaryContexts(int at_least) {
  CHECK_CU(cuInit(0));
  int count = 0;
  CHECK_CU(cuDeviceGetCount(&count));
  if (count < at_least) {
    std::fprintf(stderr, "needs at least %d devices, found %d\n", at_least, count);
    std::exit(1);
  }
  std::vector<CUcontext> contexts(count);
  for (int d = 0; d < count; ++d) {
    CUdevice dev;
    CHECK_CU(cuDeviceGet(&dev, d));
    CHECK_CU(cuDevicePrimaryCtxRetain(&contexts[d], dev));
  }
  return contexts;
}

#endif  // MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_

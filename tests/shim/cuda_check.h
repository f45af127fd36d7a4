// Tiny helpers for the integration programs: check a driver call, exit with
// a distinct code on out-of-memory so the harness can tell OOM from bugs.
#ifndef MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_
#define MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

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

#endif  // MEMVIRT_TESTS_SHIM_CUDA_CHECK_H_

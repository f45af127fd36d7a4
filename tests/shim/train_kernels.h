// The kernels the training-like workloads use (tests/shim/test_kernels.cc) and
// a one-thread launch helper; errors exit as in cuda_check.h.
#ifndef MEMVIRT_TESTS_SHIM_TRAIN_KERNELS_H_
#define MEMVIRT_TESTS_SHIM_TRAIN_KERNELS_H_

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "tests/shim/cuda_check.h"

struct TrainKernels {
  CUfunction init, forward, backward, sgd, fnv;
};

// Loads the kernels from the module at `path`. REQUIRES: a current context.
inline TrainKernels LoadTrainKernels(const char* path) {
  CUmodule mod;
  CHECK_CU(cuModuleLoad(&mod, path));
  TrainKernels k;
  CHECK_CU(cuModuleGetFunction(&k.init, mod, "init_uniform"));
  CHECK_CU(cuModuleGetFunction(&k.forward, mod, "forward"));
  CHECK_CU(cuModuleGetFunction(&k.backward, mod, "backward"));
  CHECK_CU(cuModuleGetFunction(&k.sgd, mod, "sgd_momentum"));
  CHECK_CU(cuModuleGetFunction(&k.fnv, mod, "fnv_bytes"));
  return k;
}

// Both training workloads: kTrainLayers layers of four buffers (weight,
// gradient, momentum, activation) sharing FOOTPRINT_BYTES.
inline constexpr int kTrainLayers = 8;
inline uint64_t TrainLayerBytes(uint64_t footprint) {
  return footprint / (4 * kTrainLayers) / 4096 * 4096;
}

inline void Launch(CUfunction f, CUstream s, std::vector<void*> args) {
  CHECK_CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args.data(), nullptr));
}

#endif  // MEMVIRT_TESTS_SHIM_TRAIN_KERNELS_H_

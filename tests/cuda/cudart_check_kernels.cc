// Host implementations of cudart_api_check.cu's kernels for the simulated driver: each is
// `extern "C" void <mangled kernel name>(void** params)` (params[i] points at argument i, laid
// out as the cubin's parameter info says) and runs once per launch over the whole grid
// (sim/include/memsim/kernel.h). Loaded through MEMSIM_KERNELS.
#include <cstdint>

#include "memsim/kernel.h"

namespace {

// Threads of the current launch, as the kernel's `blockIdx.x * blockDim.x + threadIdx.x` range.
int64_t LaunchThreads() { return static_cast<int64_t>(memsim_total_threads_x()); }

}  // namespace

// __global__ void ScaleAdd(float* y, const float* x, float a, int n)
extern "C" __attribute__((visibility("default"))) void _Z8ScaleAddPfPKffi(void** params) {
  float* y = *static_cast<float**>(params[0]);
  const float* x = *static_cast<const float**>(params[1]);
  const float a = *static_cast<float*>(params[2]);
  const int n = *static_cast<int*>(params[3]);
  const int64_t threads = LaunchThreads();
  for (int64_t i = 0; i < threads && i < n; ++i) y[i] = a * x[i] + y[i];
}

// __global__ void FillPattern(unsigned* out, unsigned seed, int n)
extern "C" __attribute__((visibility("default"))) void _Z11FillPatternPjji(void** params) {
  unsigned* out = *static_cast<unsigned**>(params[0]);
  const unsigned seed = *static_cast<unsigned*>(params[1]);
  const int n = *static_cast<int*>(params[2]);
  const int64_t threads = LaunchThreads();
  for (int64_t i = 0; i < threads && i < n; ++i) {
    out[i] = (static_cast<unsigned>(i) * 2654435761u) ^ seed;
  }
}

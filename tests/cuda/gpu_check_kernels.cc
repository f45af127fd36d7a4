// Host implementations of the kernels of the GPU check's programs (tests/gpu/oversub_workload.cu
// and tests/gpu/driver_probe.cu) for the simulated driver, loaded through MEMSIM_KERNELS; names
// are the kernels' mangled names. Each runs once per launch and covers the whole index range,
// as the grid-stride loops on a GPU do.
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <thread>

#include "memsim/kernel.h"

#define MEMSIM_HOST_KERNEL(mangled) \
  extern "C" __attribute__((visibility("default"))) void mangled(void** params)

namespace {

template <typename T>
T Arg(void** params, int i) {
  return *static_cast<T*>(params[i]);
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace

// InitUniform(float* x, size_t n, unsigned long long seed)
MEMSIM_HOST_KERNEL(_Z11InitUniformPfmy) {
  float* x = Arg<float*>(params, 0);
  const size_t n = Arg<size_t>(params, 1);
  const uint64_t seed = Arg<uint64_t>(params, 2);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(Mix(seed * 0x9e3779b97f4a7c15ull + i) >> 40) / 8388608.0f - 1.0f;
  }
}

// Forward(float* out, const float* in, const float* w, size_t n)
MEMSIM_HOST_KERNEL(_Z7ForwardPfPKfS1_m) {
  float* out = Arg<float*>(params, 0);
  const float* in = Arg<const float*>(params, 1);
  const float* w = Arg<const float*>(params, 2);
  const size_t n = Arg<size_t>(params, 3);
  for (size_t i = 0; i < n; ++i) out[i] = std::tanh(in[i] * w[i] + 0.1f * in[i]);
}

// Backward(float* g, const float* a, const float* w, size_t n)
MEMSIM_HOST_KERNEL(_Z8BackwardPfPKfS1_m) {
  float* g = Arg<float*>(params, 0);
  const float* a = Arg<const float*>(params, 1);
  const float* w = Arg<const float*>(params, 2);
  const size_t n = Arg<size_t>(params, 3);
  for (size_t i = 0; i < n; ++i) g[i] = a[i] * (1.0f - a[i] * a[i]) * 0.5f + 0.01f * w[i];
}

// SgdMomentum(float* w, float* m, const float* g, size_t n)
MEMSIM_HOST_KERNEL(_Z11SgdMomentumPfS_PKfm) {
  float* w = Arg<float*>(params, 0);
  float* m = Arg<float*>(params, 1);
  const float* g = Arg<const float*>(params, 2);
  const size_t n = Arg<size_t>(params, 3);
  for (size_t i = 0; i < n; ++i) {
    m[i] = 0.9f * m[i] + g[i];
    w[i] -= 0.05f * m[i];
  }
}

// HashSum(unsigned long long* out, const unsigned* x, size_t n): *out += sum of hashes.
MEMSIM_HOST_KERNEL(_Z7HashSumPyPKjm) {
  auto* out = Arg<unsigned long long*>(params, 0);
  const unsigned* x = Arg<const unsigned*>(params, 1);
  const size_t n = Arg<size_t>(params, 2);
  unsigned long long sum = 0;
  for (size_t i = 0; i < n; ++i) sum += Mix(x[i] ^ (static_cast<unsigned long long>(i) << 32));
  *out += sum;
}

// ProbeTouch(unsigned* p, size_t n, unsigned add)
MEMSIM_HOST_KERNEL(_Z10ProbeTouchPjmj) {
  unsigned* p = Arg<unsigned*>(params, 0);
  const size_t n = Arg<size_t>(params, 1);
  const unsigned add = Arg<unsigned>(params, 2);
  for (size_t i = 0; i < n; ++i) p[i] += add;
}

// ProbeSpin(unsigned long long ns): a kernel that runs for `ns` nanoseconds.
MEMSIM_HOST_KERNEL(_Z9ProbeSpiny) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(Arg<unsigned long long>(params, 0)));
}

// ProbeSpinTouch(volatile unsigned* p, unsigned long long ns): writes p[0] for `ns` ns.
MEMSIM_HOST_KERNEL(_Z14ProbeSpinTouchPVjy) {
  volatile unsigned* p = Arg<volatile unsigned*>(params, 0);
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::nanoseconds(Arg<unsigned long long>(params, 1));
  while (std::chrono::steady_clock::now() < end) p[0] = p[0] + 1;
}

// ProbeParams(int, float4, char, double2, short): only its parameter layout is probed.
MEMSIM_HOST_KERNEL(_Z11ProbeParamsi6float4c7double2s) { (void)params; }

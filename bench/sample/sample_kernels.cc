// Kernels of memvirt-sample-train. On the simulated GPU a kernel is a host function that loops
// over its elements (see memsim/kernel.h); the arithmetic is integer and wrap-around so that the
// result is bit-exact and the host can verify it (sample_math.h).
#include <cstdint>
#include <cstring>

#include "memsim/kernel.h"
#include "sample_math.h"

namespace {
template <typename T>
T Arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}
}  // namespace

// w[i] = InitWeight(seed, i)
MEMSIM_KERNEL(sample_init, sizeof(uint32_t*), sizeof(uint64_t), sizeof(uint32_t)) {
  auto* w = Arg<uint32_t*>(params, 0);
  const uint64_t n = Arg<uint64_t>(params, 1);
  const uint32_t seed = Arg<uint32_t>(params, 2);
  for (uint64_t i = 0; i < n; ++i) w[i] = memvirt_sample::InitWeight(seed, i);
}

// out[i] = Forward(in[i], w[i])
MEMSIM_KERNEL(sample_forward, sizeof(uint32_t*), sizeof(uint32_t*), sizeof(uint32_t*),
              sizeof(uint64_t)) {
  const auto* in = Arg<const uint32_t*>(params, 0);
  const auto* w = Arg<const uint32_t*>(params, 1);
  auto* out = Arg<uint32_t*>(params, 2);
  const uint64_t n = Arg<uint64_t>(params, 3);
  for (uint64_t i = 0; i < n; ++i) out[i] = memvirt_sample::Forward(in[i], w[i]);
}

// w[i] = Update(w[i], act[i], step)
MEMSIM_KERNEL(sample_update, sizeof(uint32_t*), sizeof(uint32_t*), sizeof(uint64_t),
              sizeof(uint32_t)) {
  auto* w = Arg<uint32_t*>(params, 0);
  const auto* act = Arg<const uint32_t*>(params, 1);
  const uint64_t n = Arg<uint64_t>(params, 2);
  const uint32_t step = Arg<uint32_t>(params, 3);
  for (uint64_t i = 0; i < n; ++i) w[i] = memvirt_sample::Update(w[i], act[i], step);
}

// *out = Fold(*out, data[0..n))
MEMSIM_KERNEL(sample_checksum, sizeof(uint32_t*), sizeof(uint64_t), sizeof(uint64_t*)) {
  const auto* data = Arg<const uint32_t*>(params, 0);
  const uint64_t n = Arg<uint64_t>(params, 1);
  auto* out = Arg<uint64_t*>(params, 2);
  *out = memvirt_sample::Fold(*out, data, n);
}

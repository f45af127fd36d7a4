// Kernels for the shim's integration programs, in the simulated GPU's ABI
// (sim/include/memsim/kernel.h): host functions run once per launch.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "memsim/kernel.h"
#include "tests/shim/hidden_pointers.h"

using memvirt::testing::Mix;

// x[i] = deterministic pseudo-random value in [-1, 1).
MEMSIM_KERNEL(init_uniform, sizeof(float*), sizeof(uint64_t), sizeof(uint64_t)) {
  float* x = *static_cast<float**>(params[0]);
  const uint64_t n = *static_cast<uint64_t*>(params[1]);
  const uint64_t seed = *static_cast<uint64_t*>(params[2]);
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(Mix(seed * 0x9e3779b97f4a7c15ull + i) >> 40) / 8388608.0f - 1.0f;
  }
}

// out[i] = tanh(in[i] * w[i] + 0.1 * in[i])
MEMSIM_KERNEL(forward, sizeof(float*), sizeof(float*), sizeof(float*), sizeof(uint64_t)) {
  float* out = *static_cast<float**>(params[0]);
  const float* in = *static_cast<float**>(params[1]);
  const float* w = *static_cast<float**>(params[2]);
  const uint64_t n = *static_cast<uint64_t*>(params[3]);
  for (uint64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i] * w[i] + 0.1f * in[i]);
}

// g[i] = a[i] * (1 - a[i]^2) * 0.5 + 0.01 * w[i]
MEMSIM_KERNEL(backward, sizeof(float*), sizeof(float*), sizeof(float*), sizeof(uint64_t)) {
  float* g = *static_cast<float**>(params[0]);
  const float* a = *static_cast<float**>(params[1]);
  const float* w = *static_cast<float**>(params[2]);
  const uint64_t n = *static_cast<uint64_t*>(params[3]);
  for (uint64_t i = 0; i < n; ++i) g[i] = a[i] * (1.0f - a[i] * a[i]) * 0.5f + 0.01f * w[i];
}

// m = 0.9 m + g; w -= 0.05 m
MEMSIM_KERNEL(sgd_momentum, sizeof(float*), sizeof(float*), sizeof(float*), sizeof(uint64_t)) {
  float* w = *static_cast<float**>(params[0]);
  float* m = *static_cast<float**>(params[1]);
  const float* g = *static_cast<float**>(params[2]);
  const uint64_t n = *static_cast<uint64_t*>(params[3]);
  for (uint64_t i = 0; i < n; ++i) {
    m[i] = 0.9f * m[i] + g[i];
    w[i] -= 0.05f * m[i];
  }
}

// *out = FNV-1a over the bytes of x (n bytes).
MEMSIM_KERNEL(fnv_bytes, sizeof(uint64_t*), sizeof(unsigned char*), sizeof(uint64_t)) {
  uint64_t* out = *static_cast<uint64_t**>(params[0]);
  const unsigned char* x = *static_cast<unsigned char**>(params[1]);
  const uint64_t n = *static_cast<uint64_t*>(params[2]);
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ x[i]) * 1099511628211ull;
  *out = h;
}

// x[off + i] = x[off + i] * 3 + k for i < len (bytes): the stress kernel. The
// whole block is passed (base pointer) so the shim must page all of it in.
MEMSIM_KERNEL(bytes_mix, sizeof(unsigned char*), sizeof(uint64_t), sizeof(uint64_t),
              sizeof(uint32_t)) {
  unsigned char* x = *static_cast<unsigned char**>(params[0]);
  const uint64_t off = *static_cast<uint64_t*>(params[1]);
  const uint64_t len = *static_cast<uint64_t*>(params[2]);
  const uint32_t k = *static_cast<uint32_t*>(params[3]);
  for (uint64_t i = 0; i < len; ++i) {
    x[off + i] = static_cast<unsigned char>(x[off + i] * 3u + k);
  }
}

// Kernels that reach memory through addresses the shim's argument scan does
// not see (tests/shim/hidden_pointers.cc).
namespace {

void FillPattern(unsigned char* x, uint64_t bytes, uint64_t block, uint64_t seed) {
  for (uint64_t i = 0; i < bytes / 8; ++i) {
    const uint64_t w = memvirt::testing::PatternWord(seed, block, i);
    std::memcpy(x + 8 * i, &w, 8);
  }
}

}  // namespace

// Blocks [first, first + count) of the pointer array `table` (in device
// memory) get the pattern of `seed`.
MEMSIM_KERNEL(fill_indirect, sizeof(unsigned char**), sizeof(uint64_t), sizeof(uint64_t),
              sizeof(uint64_t), sizeof(uint64_t)) {
  unsigned char* const* table = *static_cast<unsigned char***>(params[0]);
  const uint64_t first = *static_cast<uint64_t*>(params[1]);
  const uint64_t count = *static_cast<uint64_t*>(params[2]);
  const uint64_t bytes = *static_cast<uint64_t*>(params[3]);
  const uint64_t seed = *static_cast<uint64_t*>(params[4]);
  for (uint64_t j = first; j < first + count; ++j) FillPattern(table[j], bytes, j, seed);
}

// table[first + i] = a_i: a pointer array a kernel builds from addresses it
// was given as plain arguments.
MEMSIM_KERNEL(store_addresses, sizeof(uint64_t*), sizeof(uint64_t), sizeof(uint64_t),
              sizeof(uint64_t), sizeof(uint64_t), sizeof(uint64_t)) {
  uint64_t* table = *static_cast<uint64_t**>(params[0]);
  const uint64_t first = *static_cast<uint64_t*>(params[1]);
  for (int i = 0; i < 4; ++i) table[first + i] = *static_cast<uint64_t*>(params[2 + i]);
}

// dst[i] = src[i] for i < count (8-byte words): a pointer array built on the
// device from another one.
MEMSIM_KERNEL(copy_words, sizeof(uint64_t*), sizeof(uint64_t*), sizeof(uint64_t)) {
  uint64_t* dst = *static_cast<uint64_t**>(params[0]);
  const uint64_t* src = *static_cast<uint64_t**>(params[1]);
  const uint64_t count = *static_cast<uint64_t*>(params[2]);
  for (uint64_t i = 0; i < count; ++i) dst[i] = src[i];
}

// *out = FNV-1a over the `bytes` bytes of block `index` of the pointer array `table`.
MEMSIM_KERNEL(fnv_indirect, sizeof(uint64_t*), sizeof(unsigned char**), sizeof(uint64_t),
              sizeof(uint64_t)) {
  uint64_t* out = *static_cast<uint64_t**>(params[0]);
  unsigned char* const* table = *static_cast<unsigned char***>(params[1]);
  const uint64_t index = *static_cast<uint64_t*>(params[2]);
  const uint64_t bytes = *static_cast<uint64_t*>(params[3]);
  const unsigned char* x = table[index];
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < bytes; ++i) h = (h ^ x[i]) * 1099511628211ull;
  *out = h;
}

// Fills the block whose address the 128-byte parameter hides.
MEMSIM_KERNEL(fill_hidden, sizeof(memvirt::testing::HiddenAddress)) {
  const auto& h = *static_cast<memvirt::testing::HiddenAddress*>(params[0]);
  FillPattern(reinterpret_cast<unsigned char*>(memvirt::testing::HiddenField(h, 4)),
              memvirt::testing::HiddenField(h, 16), memvirt::testing::HiddenField(h, 24),
              memvirt::testing::HiddenField(h, 32));
}

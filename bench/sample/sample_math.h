// The arithmetic of memvirt-sample-train, shared by its kernels and its host-side verifier.
// Integer, wrap-around and order-independent per element, so results are bit-exact.
#ifndef MEMVIRT_BENCH_SAMPLE_SAMPLE_MATH_H_
#define MEMVIRT_BENCH_SAMPLE_SAMPLE_MATH_H_

#include <cstddef>
#include <cstdint>

namespace memvirt_sample {

inline uint32_t Mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

inline uint32_t InitWeight(uint32_t seed, uint64_t i) {
  return Mix(seed * 0x9e3779b9U + static_cast<uint32_t>(i));
}

inline uint32_t Input(uint32_t iteration, uint64_t i) {
  return Mix(iteration * 0x85ebca6bU ^ static_cast<uint32_t>(i * 2654435761U));
}

inline uint32_t Forward(uint32_t in, uint32_t w) { return (in * (w | 1U)) ^ (w >> 7); }

inline uint32_t Update(uint32_t w, uint32_t act, uint32_t step) { return w + ((act >> 5) ^ step); }

// FNV-1a over 32-bit words.
inline uint64_t Fold(uint64_t h, const uint32_t* data, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 1099511628211ULL;
  }
  return h;
}

inline constexpr uint64_t kFoldSeed = 1469598103934665603ULL;

}  // namespace memvirt_sample

#endif  // MEMVIRT_BENCH_SAMPLE_SAMPLE_MATH_H_

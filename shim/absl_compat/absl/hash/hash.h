// Standard-library stand-in for absl::HashOf in libmemshim.so's build of
// policy/ (shim/absl_compat/README.md). Values are stable within a process,
// which is all the policies rely on.
#ifndef MEMVIRT_SHIM_ABSL_COMPAT_ABSL_HASH_HASH_H_
#define MEMVIRT_SHIM_ABSL_COMPAT_ABSL_HASH_HASH_H_

#include <cstddef>
#include <cstdint>
#include <functional>

namespace absl {

template <typename... T>
size_t HashOf(const T&... values) {
  uint64_t h = 0x243f6a8885a308d3ULL;
  // A multiply-xorshift step per value (std::hash of an integer is the
  // identity in libstdc++): order-dependent and well mixed.
  ((h = (h ^ static_cast<uint64_t>(std::hash<T>{}(values))) * 0x9e3779b97f4a7c15ULL, h ^= h >> 32),
   ...);
  return static_cast<size_t>(h);
}

}  // namespace absl

#endif  // MEMVIRT_SHIM_ABSL_COMPAT_ABSL_HASH_HASH_H_

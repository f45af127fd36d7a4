// What the hidden-pointer kernels of test_kernels.cc and the program
// hidden_pointers.cc agree on: the fill pattern and the structure parameter
// that carries an address the shim's argument scan cannot see.
#ifndef MEMVIRT_TESTS_SHIM_HIDDEN_POINTERS_H_
#define MEMVIRT_TESTS_SHIM_HIDDEN_POINTERS_H_

#include <cstdint>
#include <cstring>

namespace memvirt::testing {

// A 64-bit mixing function (MurmurHash3's finalizer).
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// Word `i` of block `block` filled with `seed`.
inline uint64_t PatternWord(uint64_t seed, uint64_t block, uint64_t i) {
  return Mix(seed * 0x9e3779b97f4a7c15ull + (block << 40) + i);
}

// A 128-byte parameter, like a CUtensorMap, whose global address is not an
// aligned 8-byte word: it is stored at byte 4 (the rest describes the fill).
struct HiddenAddress {
  unsigned char bytes[128];
};
static_assert(sizeof(HiddenAddress) == 128);

inline HiddenAddress MakeHiddenAddress(uint64_t address, uint64_t length, uint64_t block,
                                       uint64_t seed) {
  HiddenAddress h = {};
  std::memcpy(h.bytes + 4, &address, 8);
  std::memcpy(h.bytes + 16, &length, 8);
  std::memcpy(h.bytes + 24, &block, 8);
  std::memcpy(h.bytes + 32, &seed, 8);
  return h;
}

inline uint64_t HiddenField(const HiddenAddress& h, int offset) {
  uint64_t v;
  std::memcpy(&v, h.bytes + offset, 8);
  return v;
}

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_SHIM_HIDDEN_POINTERS_H_

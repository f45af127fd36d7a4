// Bounds-checked reading of little-endian fields of binary images (fatbin.h, cubin.h).
// Thread safety: pure functions.
#ifndef MEMSIM_SRC_IMAGE_BYTES_H_
#define MEMSIM_SRC_IMAGE_BYTES_H_

#include <cstdint>
#include <cstring>

namespace memsim {

// Largest image the sim accepts; larger sizes in headers are treated as corruption.
inline constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;

// The field of type T at `p` (unaligned, host byte order = little endian).
template <typename T>
T LoadField(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// [offset, offset + n) lies within [0, size), without overflow.
inline bool InBounds(uint64_t offset, uint64_t n, uint64_t size) {
  return offset <= size && n <= size - offset;
}

}  // namespace memsim

#endif  // MEMSIM_SRC_IMAGE_BYTES_H_

// Page contents of memvirt-test-client, shared with the tests that verify its checksum.
#ifndef MEMVIRT_TESTS_DAEMON_PAGE_PATTERN_H_
#define MEMVIRT_TESTS_DAEMON_PAGE_PATTERN_H_

#include <cstdint>
#include <vector>

namespace memvirt::testing {

inline constexpr size_t kPageDataBytes = 4096;
inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;

// What page `page` holds after iteration `iteration` wrote it (an xorshift stream).
inline void FillPage(int page, int iteration, std::vector<uint8_t>& data) {
  data.resize(kPageDataBytes);
  uint64_t x = (static_cast<uint64_t>(page) << 32) ^ static_cast<uint64_t>(iteration) ^
               0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < data.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = static_cast<uint8_t>(x >> 24);
  }
}

inline uint64_t Fnv1a(const std::vector<uint8_t>& data, uint64_t h) {
  for (uint8_t b : data) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_DAEMON_PAGE_PATTERN_H_

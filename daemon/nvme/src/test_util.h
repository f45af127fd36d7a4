// Helpers shared by the NVMe tier's tests: temporary directories, aligned buffers, patterns and
// an independent checksum (FNV-1a, so integrity checks do not trust the CRC code under test).
#ifndef MEMVIRT_NVME_SRC_TEST_UTIL_H_
#define MEMVIRT_NVME_SRC_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "absl/types/span.h"

namespace memvirt::nvme::testing {

// A fresh directory under `parent` (default /var/tmp: a real file system, unlike tmpfs),
// removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& parent = "/var/tmp") {
    std::string templ = parent + "/memvirt-nvme-test-XXXXXX";
    if (mkdtemp(templ.data()) != nullptr) path_ = templ;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// A 4096-byte aligned buffer, as O_DIRECT needs.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t size) : size_(size) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, size) == 0) data_.reset(static_cast<uint8_t*>(p));
  }
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  absl::Span<uint8_t> span() const { return {data_.get(), size_}; }

 private:
  size_t size_;
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

inline void FillRandom(absl::Span<uint8_t> s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    const uint64_t v = rng();
    for (int b = 0; b < 8; ++b) s[i + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  for (; i < s.size(); ++i) s[i] = static_cast<uint8_t>(rng());
}

inline uint64_t Fnv1a(absl::Span<const uint8_t> s) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : s) {
    h ^= b;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace memvirt::nvme::testing

#endif  // MEMVIRT_NVME_SRC_TEST_UTIL_H_

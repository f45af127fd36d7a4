#include "memvirt/nvme/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "test_util.h"

namespace memvirt::nvme {
namespace {

struct Vector {
  std::vector<uint8_t> data;
  uint32_t crc;
};

// RFC 3720 appendix B.4 and the common "123456789" check value.
std::vector<Vector> KnownVectors() {
  std::vector<Vector> v;
  v.push_back({std::vector<uint8_t>(32, 0x00), 0x8A9136AAu});
  v.push_back({std::vector<uint8_t>(32, 0xFF), 0x62A8AB43u});
  std::vector<uint8_t> inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  v.push_back({inc, 0x46DD794Eu});
  v.push_back({dec, 0x113FDB5Cu});
  const char* digits = "123456789";
  v.push_back({std::vector<uint8_t>(digits, digits + 9), 0xE3069283u});
  v.push_back({{}, 0u});
  return v;
}

TEST(Crc32cTest, PortableMatchesRfc3720Vectors) {
  for (const Vector& v : KnownVectors()) {
    EXPECT_EQ(Crc32cPortable(v.data.data(), v.data.size()), v.crc) << v.data.size();
  }
}

TEST(Crc32cTest, HardwareMatchesRfc3720Vectors) {
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "CPU without SSE4.2";
  for (const Vector& v : KnownVectors()) {
    EXPECT_EQ(Crc32cHardware(v.data.data(), v.data.size()), v.crc) << v.data.size();
    EXPECT_EQ(Crc32c(v.data.data(), v.data.size()), v.crc);
  }
}

TEST(Crc32cTest, ImplementationsAgreeOnAllLengthsAndAlignments) {
  std::vector<uint8_t> data(4096 + 16);
  testing::FillRandom(absl::MakeSpan(data), 7);
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t len : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 4096u}) {
      EXPECT_EQ(Crc32cPortable(data.data() + offset, len), Crc32c(data.data() + offset, len))
          << offset << " " << len;
    }
  }
}

TEST(Crc32cTest, InterleavedLongInputsMatchPortable) {
  // Lengths around the 3 x 256 and 3 x 8192 byte block boundaries of the hardware path.
  std::vector<uint8_t> data((2 << 20) + 128);  // longest length + largest offset fit
  testing::FillRandom(absl::MakeSpan(data), 17);
  for (size_t len : {767u, 768u, 769u, 1543u, 24575u, 24576u, 24577u, 49152u + 768u + 13u, 2u << 20,
                     (2u << 20) + 63u}) {
    for (size_t offset : {0u, 3u}) {
      EXPECT_EQ(Crc32c(data.data() + offset, len), Crc32cPortable(data.data() + offset, len))
          << len << " " << offset;
    }
  }
}

TEST(Crc32cTest, IncrementalEqualsOneShot) {
  std::vector<uint8_t> data(10000);
  testing::FillRandom(absl::MakeSpan(data), 11);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t split : {0u, 1u, 13u, 4096u, 9999u}) {
    const uint32_t a = Crc32c(data.data(), split);
    EXPECT_EQ(Crc32c(data.data() + split, data.size() - split, a), whole) << split;
    EXPECT_EQ(Crc32cPortable(data.data() + split, data.size() - split,
                             Crc32cPortable(data.data(), split)),
              whole);
  }
}

TEST(Crc32cTest, DetectsEverySingleBitFlip) {
  std::vector<uint8_t> data(512);
  testing::FillRandom(absl::MakeSpan(data), 3);
  const uint32_t good = Crc32c(data.data(), data.size());
  for (size_t bit = 0; bit < data.size() * 8; bit += 37) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(Crc32c(data.data(), data.size()), good) << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace memvirt::nvme

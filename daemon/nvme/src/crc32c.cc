#include "memvirt/nvme/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#endif

namespace memvirt::nvme {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// tables[k][b]: CRC of byte b followed by k zero bytes (slicing-by-8).
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1u) ? kPolyReflected : 0u);
    t[0][b] = c;
  }
  for (int k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian host assumed (x86-64, aarch64)
    word ^= c;
    c = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^ kTables[5][(word >> 16) & 0xFF] ^
        kTables[4][(word >> 24) & 0xFF] ^ kTables[3][(word >> 32) & 0xFF] ^
        kTables[2][(word >> 40) & 0xFF] ^ kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__)
namespace {

// Note [interleaved crc32]: the crc32 instruction has a latency of 3 cycles and a throughput of
// one per cycle, so one dependency chain runs at a third of the possible speed. Long inputs are
// split into three adjacent blocks whose CRCs are computed in parallel chains and then combined:
// CRC(A || B) = shift(CRC(A), |B|) ^ CRC(B), where shift() appends |B| zero bytes to A's CRC, a
// linear map over GF(2) applied with four 256-entry tables (Mark Adler's construction).
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

uint32_t Gf2MatrixTimes(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1u) sum ^= *mat;
  }
  return sum;
}

void Gf2MatrixSquare(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2MatrixTimes(mat, mat[n]);
}

// Tables applying `len` zero bytes (len a power of two) to a CRC register.
ShiftTables MakeShiftTables(size_t len) {
  uint32_t odd[32], even[32];
  odd[0] = kPolyReflected;  // operator for one zero bit
  for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
  Gf2MatrixSquare(even, odd);  // two zero bits
  Gf2MatrixSquare(odd, even);  // four zero bits
  const uint32_t* op = nullptr;
  while (true) {
    Gf2MatrixSquare(even, odd);  // 8, 32, 128, ... bits
    len >>= 1;
    if (len == 0) {
      op = even;
      break;
    }
    Gf2MatrixSquare(odd, even);
    len >>= 1;
    if (len == 0) {
      op = odd;
      break;
    }
  }
  ShiftTables t{};
  for (uint32_t n = 0; n < 256; ++n) {
    t[0][n] = Gf2MatrixTimes(op, n);
    t[1][n] = Gf2MatrixTimes(op, n << 8);
    t[2][n] = Gf2MatrixTimes(op, n << 16);
    t[3][n] = Gf2MatrixTimes(op, n << 24);
  }
  return t;
}

uint32_t Shift(const ShiftTables& t, uint32_t crc) {
  return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
}

__attribute__((target("sse4.2"))) uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

// Three chains over [p, p+block), [p+block, p+2 block), [p+2 block, p+3 block).
__attribute__((target("sse4.2"))) uint64_t Crc3Way(uint64_t crc0, const uint8_t* p, size_t block,
                                                   const ShiftTables& shift) {
  uint64_t crc1 = 0, crc2 = 0;
  const uint8_t* end = p + block;
  for (; p < end; p += 8) {
    crc0 = _mm_crc32_u64(crc0, Load64(p));
    crc1 = _mm_crc32_u64(crc1, Load64(p + block));
    crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * block));
  }
  crc0 = Shift(shift, static_cast<uint32_t>(crc0)) ^ crc1;
  return Shift(shift, static_cast<uint32_t>(crc0)) ^ crc2;
}

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const void* data, size_t n,
                                                          uint32_t crc) {
  static const ShiftTables kLongShift = MakeShiftTables(kLongBlock);
  static const ShiftTables kShortShift = MakeShiftTables(kShortBlock);
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t c = ~crc;
  while (n >= 3 * kLongBlock) {
    c = Crc3Way(c, p, kLongBlock, kLongShift);
    p += 3 * kLongBlock;
    n -= 3 * kLongBlock;
  }
  while (n >= 3 * kShortBlock) {
    c = Crc3Way(c, p, kShortBlock, kShortShift);
    p += 3 * kShortBlock;
    n -= 3 * kShortBlock;
  }
  while (n >= 8) {
    c = _mm_crc32_u64(c, Load64(p));
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool Crc32cHardwareAvailable() {
  static const bool available = [] {
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ecx & bit_SSE4_2) != 0;
  }();
  return available;
}
#else
uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc) {
  return Crc32cPortable(data, n, crc);
}
bool Crc32cHardwareAvailable() { return false; }
#endif

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  return Crc32cHardwareAvailable() ? Crc32cHardware(data, n, crc) : Crc32cPortable(data, n, crc);
}

}  // namespace memvirt::nvme

// MD2 message digest (RFC 1319) and HMAC over it (RFC 2104 with MD2's 16-byte block).
//
// Used only by the integrity check of the private runtime interface (Note [integrity check] in
// export_tables.h); MD2 is not a secure hash and nothing else should use it.
// Thread safety: Md2 objects are not shared; the free functions are pure.
#ifndef MEMSIM_SRC_MD2_H_
#define MEMSIM_SRC_MD2_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace memsim {

using Md2Digest = std::array<uint8_t, 16>;

class Md2 {
 public:
  Md2();
  void Update(const void* data, size_t size);
  // Pads, appends the checksum and returns the digest. The object must not be updated after.
  Md2Digest Finish();

 private:
  void AddByte(uint8_t byte);
  void Compress();

  std::array<uint8_t, 48> state_{};
  std::array<uint8_t, 16> checksum_{};
  std::array<uint8_t, 16> block_{};
  size_t filled_ = 0;
  uint8_t last_ = 0;  // L of RFC 1319 section 3.2
};

// HMAC-MD2: MD2((key ^ 0x5c) || MD2((key ^ 0x36) || message)) for a 16-byte key.
Md2Digest HmacMd2(const std::array<uint8_t, 16>& key, const void* message, size_t size);

}  // namespace memsim

#endif  // MEMSIM_SRC_MD2_H_

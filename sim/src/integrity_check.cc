#include "integrity_check.h"

#include <cstring>

#include "md2.h"

namespace memsim {

namespace {

constexpr std::array<uint8_t, 16> kIntegrityKey = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                                   0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};
constexpr uint64_t kFixedHigh = 0x8ED383AA1F4CD1E8ull;

}  // namespace

std::array<uint64_t, 2> IntegrityAnswer(const IntegrityRecord& record,
                                        const std::vector<DeviceIdentity>& devices) {
  switch (record.version % 10) {
    case 0:
      return {0x3341181C03CB675Cull, kFixedHigh};
    case 1:
      return {0x1841181C03CB675Cull, kFixedHigh};
    default:
      break;
  }
  std::vector<uint8_t> message(sizeof(record) + devices.size() * sizeof(DeviceIdentity));
  std::memcpy(message.data(), &record, sizeof(record));
  if (!devices.empty()) {
    std::memcpy(message.data() + sizeof(record), devices.data(),
                devices.size() * sizeof(DeviceIdentity));
  }
  const Md2Digest digest = HmacMd2(kIntegrityKey, message.data(), message.size());
  std::array<uint64_t, 2> out;
  std::memcpy(out.data(), digest.data(), sizeof(out));
  return out;
}

}  // namespace memsim

#include "integrity_check.h"

#include <gtest/gtest.h>

#include <cstring>

#include "md2.h"

namespace memsim {
namespace {

IntegrityRecord Record(uint32_t version) {
  static int tables[3];
  IntegrityRecord r;
  r.driver_version = 13000;
  r.version = version;
  r.pid = 4242;
  r.thread = 0x9abcdef0;
  r.runtime_interface_table = &tables[0];
  r.integrity_table = &tables[1];
  r.integrity_function = &tables[2];
  r.unix_seconds = 1764000000;
  return r;
}

std::vector<DeviceIdentity> Devices(int n) {
  std::vector<DeviceIdentity> d(n);
  for (int i = 0; i < n; ++i) {
    for (int b = 0; b < 16; ++b) d[i].uuid[b] = static_cast<uint8_t>(i * 16 + b);
    d[i].pci_domain = 0;
    d[i].pci_bus = 0x10 + i;
    d[i].pci_device = 0;
  }
  return d;
}

TEST(IntegrityCheck, VersionsEndingInZeroOrOneGetFixedWords) {
  EXPECT_EQ(IntegrityAnswer(Record(13000), Devices(1))[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(IntegrityAnswer(Record(13001), Devices(2))[0], 0x1841181C03CB675Cull);
  EXPECT_EQ(IntegrityAnswer(Record(13001), Devices(2))[1], 0x8ED383AA1F4CD1E8ull);
}

TEST(IntegrityCheck, OtherVersionsHashTheRecordAndEveryDevice) {
  const std::array<uint8_t, 16> key = {0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52,
                                       0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F};
  const IntegrityRecord record = Record(13002);
  const auto devices = Devices(2);
  uint8_t message[48 + 2 * 28];
  std::memcpy(message, &record, 48);
  std::memcpy(message + 48, devices.data(), 56);
  const Md2Digest expected = HmacMd2(key, message, sizeof(message));
  const auto answer = IntegrityAnswer(record, devices);
  EXPECT_EQ(std::memcmp(answer.data(), expected.data(), 16), 0);
  // Every input matters: the time, the device list and its order.
  IntegrityRecord later = record;
  later.unix_seconds += 1;
  EXPECT_NE(IntegrityAnswer(later, devices), answer);
  EXPECT_NE(IntegrityAnswer(record, Devices(1)), answer);
  auto swapped = devices;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(IntegrityAnswer(record, swapped), answer);
  EXPECT_EQ(IntegrityAnswer(record, devices), answer);
}

}  // namespace
}  // namespace memsim

// The answer to the runtime's integrity check (slot 1 of the INTEGRITY_CHECK export table).
//
// Note [integrity check]: libcudart 13.0 calls the slot with versions 13000, 13001 and 13002 and
// verifies the 13002 answer (a wrong one fails every runtime call with error 103, "integrity
// checks failed"). Versions ending in 0 or 1 are answered with fixed words; any other version
// gets an HMAC-MD2 (md2.h), under a fixed 16-byte key, of a 48-byte record of the caller's
// context (IntegrityRecord) followed by one 28-byte record per device (DeviceIdentity), in
// device order. The layout was checked against CUDA 13.0 (libcudart 13.0.88); a test runs the
// toolkit's libcudart against it (tests/cuda).
// Thread safety: pure functions.
#ifndef MEMSIM_SRC_INTEGRITY_CHECK_H_
#define MEMSIM_SRC_INTEGRITY_CHECK_H_

#include <array>
#include <cstdint>
#include <vector>

namespace memsim {

#pragma pack(push, 1)
struct IntegrityRecord {
  uint32_t driver_version;  // cuDriverGetVersion
  uint32_t version;         // the slot's version argument
  uint32_t pid;             // getpid()
  uint32_t thread;          // low 32 bits of pthread_self()
  const void* runtime_interface_table;
  const void* integrity_table;
  const void* integrity_function;
  uint64_t unix_seconds;  // the slot's time argument
};
struct DeviceIdentity {
  uint8_t uuid[16];  // cuDeviceGetUuid
  int32_t pci_domain;
  int32_t pci_bus;
  int32_t pci_device;
};
#pragma pack(pop)
static_assert(sizeof(IntegrityRecord) == 48, "x86-64 layout of the integrity record");
static_assert(sizeof(DeviceIdentity) == 28, "layout of a device's integrity record");

std::array<uint64_t, 2> IntegrityAnswer(const IntegrityRecord& record,
                                        const std::vector<DeviceIdentity>& devices);

}  // namespace memsim

#endif  // MEMSIM_SRC_INTEGRITY_CHECK_H_

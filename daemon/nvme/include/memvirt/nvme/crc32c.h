// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78) as used by iSCSI (RFC 3720),
// ext4 and NVMe. Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run
// time) and a slicing-by-8 table otherwise; both give identical results.
//
// Thread safety: pure functions, safe from any thread.
#ifndef MEMVIRT_NVME_CRC32C_H_
#define MEMVIRT_NVME_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace memvirt::nvme {

// CRC32C of data[0, n). To checksum a message in pieces pass the previous result as `crc`:
// Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a+b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

// The two implementations, exposed for tests and benchmarks. Crc32cHardware REQUIRES
// Crc32cHardwareAvailable().
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);
uint32_t Crc32cHardware(const void* data, size_t n, uint32_t crc = 0);
bool Crc32cHardwareAvailable();

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_CRC32C_H_

// Simulated-device configuration read from the environment (see docs/sim.md).
//
// Thread safety: Config is a plain value; LoadConfigFromEnv() only reads the environment.
#ifndef MEMSIM_SRC_CONFIG_H_
#define MEMSIM_SRC_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace memsim {

struct Config {
  uint64_t device_memory = 1ULL << 30;  // MEMSIM_DEVICE_MEMORY, bytes per device
  int device_count = 1;                 // MEMSIM_DEVICE_COUNT
  double h2d_gbps = 0;                  // MEMSIM_H2D_GBPS, 0 = unthrottled
  double d2h_gbps = 0;                  // MEMSIM_D2H_GBPS, 0 = unthrottled
  std::string node;                     // MEMSIM_NODE, empty = capacity private to the process
  uint64_t va_size = 256ULL << 30;      // MEMSIM_VA_SIZE, virtual address space per device
  double map_us = 0;                    // MEMSIM_MAP_US, cost of cuMemMap/Unmap/SetAccess
  bool host_numa = true;                // MEMSIM_HOST_NUMA, HOST_NUMA locations in the VMM API
};

// Parses "123", "64K", "512M", "2G", "1T" (binary multiples, optional trailing 'B' or 'iB').
// Returns nullopt on malformed input.
std::optional<uint64_t> ParseByteSize(std::string_view text);

// Parses a non-negative decimal number ("2", "12.5"); nullopt on malformed input.
std::optional<double> ParseNonNegativeDouble(std::string_view text);

// Reads MEMSIM_* variables; malformed values keep the default and are reported on stderr.
Config LoadConfigFromEnv();

}  // namespace memsim

#endif  // MEMSIM_SRC_CONFIG_H_

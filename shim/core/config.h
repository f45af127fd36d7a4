// Shim configuration, parsed from the environment (see docs/shim.md).
//
// Thread safety: ShimConfig is a plain value; ParseShimConfig is pure apart
// from calling `getenv_fn`.
#ifndef MEMVIRT_SHIM_CORE_CONFIG_H_
#define MEMVIRT_SHIM_CORE_CONFIG_H_

#include <cstdint>
#include <string>

#include "shim/core/log.h"

namespace memvirt::shim {

inline constexpr uint64_t kChunkBytes = 2ull << 20;  // physical chunk size (2 MiB)
inline constexpr int kChunkShift = 21;
// Chunks that hold `bytes` (rounded up).
inline constexpr uint64_t ChunksFor(uint64_t bytes) {
  return (bytes + kChunkBytes - 1) >> kChunkShift;
}

struct ShimConfig {
  bool disabled = false;                     // MEMSHIM_DISABLE=1: pure pass-through
  uint64_t device_budget = 0;                // MEMSHIM_DEVICE_BUDGET; 0 = 90% of free at init
  uint64_t host_budget = 0;                  // MEMSHIM_HOST_BUDGET; 0 = half of physical RAM
  uint64_t va_bytes = 0;                     // MEMSHIM_VA_SIZE; 0 = derived from the budgets
  std::string daemon_socket;                 // MEMSHIM_DAEMON_SOCKET
  bool daemon_off = false;                   // MEMSHIM_DAEMON=off: never contact the daemon
  std::string daemon_plugin;                 // MEMSHIM_DAEMON_PLUGIN; "" = beside libmemshim.so
  uint32_t daemon_timeout_ms = 2000;         // MEMSHIM_DAEMON_TIMEOUT_MS: wait for registration
  uint32_t report_interval_ms = 200;         // MEMSHIM_REPORT_INTERVAL_MS: usage/hint batches
  uint64_t min_device_budget = 16ull << 20;  // MEMSHIM_MIN_DEVICE_BUDGET: floor asked of the daemon
  std::string policy = "lifetime";           // MEMSHIM_POLICY: lifetime | lru | library-lru
  LogLevel log_level = LogLevel::kWarn;      // MEMSHIM_LOG
  uint32_t event_batch = 32;                 // MEMSHIM_EVENT_BATCH: launches per batched event
  uint32_t event_pace = 512;                 // MEMSHIM_EVENT_PACE: Note [event pacing]; 0 = off
  uint32_t staging_slots = 8;                // MEMSHIM_STAGING_SLOTS: NVMe staging (0 = none)
  // MEMSHIM_HIDDEN_REACH=all: any kernel may follow addresses it was given
  // into memory (Note [hidden reach]); `recognized` (the default): only the
  // ways the shim recognizes.
  bool hidden_reach_all = false;
};

using GetEnvFn = const char* (*)(const char* name);

// Parses byte sizes such as "512M", "3G", "1048576", "2.5G" (K/M/G/T, powers
// of 1024). Returns false on malformed text.
bool ParseBytes(const char* text, uint64_t* out);

ShimConfig ParseShimConfig(GetEnvFn getenv_fn);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_CONFIG_H_

// Parsing and printing byte sizes: "4096", "512M", "16G", "1.5G", "2Ki"... (K/M/G/T and
// Ki/Mi/Gi/Ti are all powers of 1024, as in MEMSIM_DEVICE_MEMORY).
//
// Thread safety: pure functions.
#ifndef MEMVIRT_DAEMON_CORE_SIZE_PARSE_H_
#define MEMVIRT_DAEMON_CORE_SIZE_PARSE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace memvirt::daemon {

// INVALID_ARGUMENT on empty, negative, malformed or overflowing input.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);

// Human-readable, e.g. 1536 MiB -> "1.5GiB", 0 -> "0B".
std::string FormatBytes(uint64_t bytes);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_SIZE_PARSE_H_

// Parsing of command-line values: byte sizes and bandwidths.
//
// Byte sizes: a non-negative integer or decimal number with an optional
// suffix. K, M, G, T and Ki, Mi, Gi, Ti are binary (powers of 1024: "2M" is
// 2 MiB, as chunk sizes are spoken of); KB, MB, GB, TB are decimal (powers of
// 1000). B or no suffix: bytes. Case-sensitive. The result must be a whole
// number of bytes.
//
// Thread safety: stateless functions.

#ifndef MEMVIRT_POLICY_TOOLS_CLI_VALUES_H_
#define MEMVIRT_POLICY_TOOLS_CLI_VALUES_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace memvirt::policy {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);
// A positive finite decimal number (GB/s are decimal: 1 GB/s = 1e9 bytes/s).
absl::StatusOr<double> ParsePositiveNumber(std::string_view text);
// A finite decimal number >= 0.
absl::StatusOr<double> ParseNonNegativeNumber(std::string_view text);
absl::StatusOr<int> ParsePositiveInt(std::string_view text);

}  // namespace memvirt::policy

#endif  // MEMVIRT_POLICY_TOOLS_CLI_VALUES_H_

// Rendering of memvirt.v1.StatusResponse for memctl: an nvidia-smi-like table and the stable
// JSON document (`memctl status --json`, schema version kStatusJsonVersion: integer bytes,
// field names never reused with another meaning; see docs/operations.md).
//
// Thread safety: pure functions.
#ifndef MEMVIRT_DAEMON_MEMCTL_STATUS_FORMAT_H_
#define MEMVIRT_DAEMON_MEMCTL_STATUS_FORMAT_H_

#include <string>

#include "memvirt/v1/memvirt.pb.h"

namespace memvirt::memctl {

inline constexpr int kStatusJsonVersion = 1;

std::string FormatStatusTable(const v1::StatusResponse& status, bool headers);
std::string FormatStatusJson(const v1::StatusResponse& status);
std::string FormatClientJson(const v1::ClientDetail& detail);
std::string FormatClientText(const v1::ClientDetail& detail);

// JSON string literal for `s` (quotes included; control characters escaped).
std::string JsonQuote(const std::string& s);

}  // namespace memvirt::memctl

#endif  // MEMVIRT_DAEMON_MEMCTL_STATUS_FORMAT_H_

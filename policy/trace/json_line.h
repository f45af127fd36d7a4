// A small JSON parser for one line of a JSON Lines file.
//
// Accepts any RFC 8259 value; the memtrace-v1 reader only needs flat objects
// whose members are numbers, strings, booleans, null or arrays of those, but
// nested values parse too (so unknown members can be ignored). Numbers are
// doubles, plus an exact unsigned 64-bit value when the literal is a
// non-negative integer that fits.
//
// Thread safety: stateless functions; values are plain data.

#ifndef MEMVIRT_POLICY_TRACE_JSON_LINE_H_
#define MEMVIRT_POLICY_TRACE_JSON_LINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace memvirt::trace {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::optional<uint64_t> integer;  // set for non-negative integer literals that fit
  std::string string;
  std::vector<JsonValue> array;
  std::map<std::string, JsonValue> object;
};

// Parses `text` as exactly one JSON value (surrounding whitespace allowed).
// Errors name the byte offset of the problem.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

}  // namespace memvirt::trace

#endif  // MEMVIRT_POLICY_TRACE_JSON_LINE_H_

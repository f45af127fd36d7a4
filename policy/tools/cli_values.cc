#include "tools/cli_values.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace memvirt::policy {
namespace {

// Parses a plain decimal number (digits with at most one '.') fully.
bool ParseDecimal(std::string_view text, double* out) {
  if (text.empty()) return false;
  int dots = 0, digits = 0;
  for (char c : text) {
    if (c == '.') {
      ++dots;
    } else if (c >= '0' && c <= '9') {
      ++digits;
    } else {
      return false;
    }
  }
  if (dots > 1 || digits == 0) return false;
  *out = std::strtod(std::string(text).c_str(), nullptr);
  return std::isfinite(*out);
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  struct Suffix {
    std::string_view name;
    double factor;
  };
  static constexpr Suffix kSuffixes[] = {
      {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
      {"KB", 1e3},    {"MB", 1e6},       {"GB", 1e9},          {"TB", 1e12},
      {"K", 1024.0},  {"M", 1048576.0},  {"G", 1073741824.0},  {"T", 1099511627776.0},
      {"B", 1.0},
  };
  double factor = 1;
  std::string_view number = text;
  for (const Suffix& s : kSuffixes) {
    if (text.size() > s.name.size() && text.substr(text.size() - s.name.size()) == s.name) {
      factor = s.factor;
      number = text.substr(0, text.size() - s.name.size());
      break;
    }
  }
  double value = 0;
  if (!ParseDecimal(number, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad byte size '", std::string(text), "' (examples: 4096, 2M, 40Gi, 1.5GB)"));
  }
  const double bytes = value * factor;
  if (bytes >= 18446744073709551615.0 || bytes != std::floor(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("byte size '", std::string(text),
                                                   "' is not a whole number of bytes in range"));
  }
  return static_cast<uint64_t>(bytes);
}

absl::StatusOr<double> ParsePositiveNumber(std::string_view text) {
  double value = 0;
  if (!ParseDecimal(text, &value) || !(value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive number, got '", std::string(text), "'"));
  }
  return value;
}

absl::StatusOr<double> ParseNonNegativeNumber(std::string_view text) {
  double value = 0;
  if (!ParseDecimal(text, &value) || !(value >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number >= 0, got '", std::string(text), "'"));
  }
  return value;
}

absl::StatusOr<int> ParsePositiveInt(std::string_view text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != text.npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive integer, got '", std::string(text), "'"));
  }
  int v = std::atoi(std::string(text).c_str());
  if (v <= 0)
    return absl::InvalidArgumentError(
        absl::StrCat("expected a positive integer, got '", std::string(text), "'"));
  return v;
}

}  // namespace memvirt::policy

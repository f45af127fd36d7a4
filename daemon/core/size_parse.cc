#include "daemon/core/size_parse.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace memvirt::daemon {

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "'"));
  };
  if (text.empty()) return bad();
  absl::string_view number = text;
  absl::string_view suffix;
  size_t pos = number.find_first_not_of("0123456789.");
  if (pos != absl::string_view::npos) {
    suffix = number.substr(pos);
    number = number.substr(0, pos);
  }
  if (number.empty()) return bad();
  int shift = 0;
  std::string s = absl::AsciiStrToUpper(suffix);
  if (s == "B") s.clear();
  if (!s.empty() && s.back() == 'B') s.pop_back();
  if (s.size() == 2 && s[1] == 'I') s.pop_back();
  if (s.empty()) {
    shift = 0;
  } else if (s == "K") {
    shift = 10;
  } else if (s == "M") {
    shift = 20;
  } else if (s == "G") {
    shift = 30;
  } else if (s == "T") {
    shift = 40;
  } else {
    return bad();
  }
  if (number.find('.') == absl::string_view::npos) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(number, &v)) return bad();
    if (shift > 0 && v > (std::numeric_limits<uint64_t>::max() >> shift)) return bad();
    return v << shift;
  }
  double d = 0;
  if (!absl::SimpleAtod(number, &d) || !std::isfinite(d) || d < 0) return bad();
  const double scaled = std::ldexp(d, shift);
  if (scaled >= 1.8e19) return bad();
  return static_cast<uint64_t>(scaled);
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 5) {
    v /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, "B");
  char buf[32];
  std::snprintf(buf, sizeof(buf), v >= 100 ? "%.0f%s" : "%.1f%s", v, kUnits[unit]);
  return buf;
}

}  // namespace memvirt::daemon

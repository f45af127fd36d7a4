#include "config.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace memsim {

std::optional<uint64_t> ParseByteSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return std::nullopt;
  std::string suffix(text.substr(i));
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else {
    const char unit = suffix[0];
    const std::string rest = suffix.substr(1);
    if (!(rest.empty() || rest == "B" || rest == "IB")) return std::nullopt;
    switch (unit) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      default:
        return std::nullopt;
    }
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::optional<double> ParseNonNegativeDouble(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::string s(text);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !(v >= 0)) return std::nullopt;
  return v;
}

namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

void Warn(const char* name, const char* value) {
  std::fprintf(stderr, "memsim: ignoring malformed %s='%s'\n", name, value);
}

// Reads a non-negative number into *out; keeps *out on a malformed value.
void ReadNonNegative(const char* name, double* out) {
  const char* v = Env(name);
  if (v == nullptr) return;
  if (auto d = ParseNonNegativeDouble(v)) {
    *out = *d;
  } else {
    Warn(name, v);
  }
}

}  // namespace

Config LoadConfigFromEnv() {
  Config c;
  if (const char* v = Env("MEMSIM_DEVICE_MEMORY")) {
    auto bytes = ParseByteSize(v);
    if (bytes && *bytes > 0)
      c.device_memory = *bytes;
    else
      Warn("MEMSIM_DEVICE_MEMORY", v);
  }
  if (const char* v = Env("MEMSIM_DEVICE_COUNT")) {
    auto n = ParseByteSize(v);
    if (n && *n >= 1 && *n <= 16)
      c.device_count = static_cast<int>(*n);
    else
      Warn("MEMSIM_DEVICE_COUNT", v);
  }
  ReadNonNegative("MEMSIM_H2D_GBPS", &c.h2d_gbps);
  ReadNonNegative("MEMSIM_D2H_GBPS", &c.d2h_gbps);
  ReadNonNegative("MEMSIM_MAP_US", &c.map_us);
  if (const char* v = Env("MEMSIM_HOST_NUMA")) {
    auto n = ParseByteSize(v);
    if (n && *n <= 1)
      c.host_numa = *n == 1;
    else
      Warn("MEMSIM_HOST_NUMA", v);
  }
  if (const char* v = Env("MEMSIM_NODE")) c.node = v;
  if (const char* v = Env("MEMSIM_VA_SIZE")) {
    auto bytes = ParseByteSize(v);
    if (bytes && *bytes >= (1ULL << 30))
      c.va_size = *bytes;
    else
      Warn("MEMSIM_VA_SIZE", v);
  }
  return c;
}

}  // namespace memsim

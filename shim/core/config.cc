#include "shim/core/config.h"

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace memvirt::shim {

bool ParseBytes(const char* text, uint64_t* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  double value = strtod(text, &end);
  if (end == text || value < 0) return false;
  double scale = 1;
  switch (toupper(static_cast<unsigned char>(*end))) {
    case '\0':
      break;
    case 'K':
      scale = 1024.0;
      break;
    case 'M':
      scale = 1024.0 * 1024;
      break;
    case 'G':
      scale = 1024.0 * 1024 * 1024;
      break;
    case 'T':
      scale = 1024.0 * 1024 * 1024 * 1024;
      break;
    default:
      return false;
  }
  if (*end != '\0') {
    ++end;
    if (toupper(static_cast<unsigned char>(*end)) == 'I') ++end;
    if (toupper(static_cast<unsigned char>(*end)) == 'B') ++end;
    if (*end != '\0') return false;
  }
  *out = static_cast<uint64_t>(value * scale);
  return true;
}

ShimConfig ParseShimConfig(GetEnvFn getenv_fn) {
  ShimConfig config;
  const char* v = getenv_fn("MEMSHIM_DISABLE");
  config.disabled = v != nullptr && *v != '\0' && strcmp(v, "0") != 0;
  config.log_level = ParseLogLevel(getenv_fn("MEMSHIM_LOG"));
  if (!ParseBytes(getenv_fn("MEMSHIM_DEVICE_BUDGET"), &config.device_budget)) {
    config.device_budget = 0;
  }
  if (!ParseBytes(getenv_fn("MEMSHIM_HOST_BUDGET"), &config.host_budget)) {
    config.host_budget = 0;
  }
  if (!ParseBytes(getenv_fn("MEMSHIM_VA_SIZE"), &config.va_bytes)) config.va_bytes = 0;
  if ((v = getenv_fn("MEMSHIM_DAEMON_SOCKET")) != nullptr) config.daemon_socket = v;
  if ((v = getenv_fn("MEMSHIM_DAEMON")) != nullptr) {
    config.daemon_off = strcmp(v, "off") == 0 || strcmp(v, "0") == 0;
  }
  if ((v = getenv_fn("MEMSHIM_DAEMON_PLUGIN")) != nullptr) config.daemon_plugin = v;
  if ((v = getenv_fn("MEMSHIM_DAEMON_TIMEOUT_MS")) != nullptr) {
    long n = strtol(v, nullptr, 10);
    if (n >= 0 && n <= 600000) config.daemon_timeout_ms = static_cast<uint32_t>(n);
  }
  if ((v = getenv_fn("MEMSHIM_REPORT_INTERVAL_MS")) != nullptr) {
    long n = strtol(v, nullptr, 10);
    if (n >= 10 && n <= 60000) config.report_interval_ms = static_cast<uint32_t>(n);
  }
  uint64_t min_budget = 0;
  if (ParseBytes(getenv_fn("MEMSHIM_MIN_DEVICE_BUDGET"), &min_budget)) {
    config.min_device_budget = min_budget;
  }
  if ((v = getenv_fn("MEMSHIM_POLICY")) != nullptr && *v != '\0') config.policy = v;
  if ((v = getenv_fn("MEMSHIM_HIDDEN_REACH")) != nullptr) {
    if (std::strcmp(v, "all") == 0) {
      config.hidden_reach_all = true;
    } else if (*v != '\0' && std::strcmp(v, "recognized") != 0) {
      MEMSHIM_LOG(kWarn, "MEMSHIM_HIDDEN_REACH=%s is neither `all` nor `recognized`; ignored", v);
    }
  }
  if ((v = getenv_fn("MEMSHIM_STAGING_SLOTS")) != nullptr) {
    long n = strtol(v, nullptr, 10);
    if (n >= 0 && n <= 256) config.staging_slots = static_cast<uint32_t>(n);
  }
  if ((v = getenv_fn("MEMSHIM_EVENT_BATCH")) != nullptr) {
    long n = strtol(v, nullptr, 10);
    if (n >= 1 && n <= 4096) config.event_batch = static_cast<uint32_t>(n);
  }
  if ((v = getenv_fn("MEMSHIM_EVENT_PACE")) != nullptr) {
    long n = strtol(v, nullptr, 10);
    if (n >= 0 && n <= 65536) config.event_pace = static_cast<uint32_t>(n);
  }
  return config;
}

}  // namespace memvirt::shim

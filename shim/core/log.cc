#include "shim/core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace memvirt::shim {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
    default:
      return "off";
  }
}

}  // namespace

LogLevel ParseLogLevel(const char* text) {
  if (text == nullptr || *text == '\0') return LogLevel::kWarn;
  static constexpr const char* kNames[] = {"off", "error", "warn", "info", "debug"};
  for (int i = 0; i < 5; ++i) {
    if (strcasecmp(text, kNames[i]) == 0) return static_cast<LogLevel>(i);
  }
  if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') {
    return static_cast<LogLevel>(text[0] - '0');
  }
  return LogLevel::kWarn;
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, const char* format, ...) {
  char line[1024];
  int n = snprintf(line, sizeof(line), "memshim[%d] %s: ", static_cast<int>(getpid()),
                   LevelName(level));
  if (n < 0) return;
  va_list args;
  va_start(args, format);
  int m = vsnprintf(line + n, sizeof(line) - n - 1, format, args);
  va_end(args);
  if (m < 0) return;
  size_t len = strnlen(line, sizeof(line) - 2);
  line[len] = '\n';
  ssize_t ignored = write(STDERR_FILENO, line, len + 1);
  (void)ignored;
}

}  // namespace memvirt::shim

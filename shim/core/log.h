// One-line diagnostics to stderr, filtered by MEMSHIM_LOG.
//
// Thread safety: all functions may be called from any thread; each message is
// written with a single write(2) so lines from different threads do not mix.
#ifndef MEMVIRT_SHIM_CORE_LOG_H_
#define MEMVIRT_SHIM_CORE_LOG_H_

namespace memvirt::shim {

enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

// Parses "off|error|warn|info|debug" (or 0..4); unknown or null → kWarn.
LogLevel ParseLogLevel(const char* text);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// printf-style; prefixes "memshim[<pid>] <level>: " and appends a newline.
void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

}  // namespace memvirt::shim

#define MEMSHIM_LOG(level, ...)                                            \
  do {                                                                     \
    if (::memvirt::shim::LogEnabled(::memvirt::shim::LogLevel::level))     \
      ::memvirt::shim::Log(::memvirt::shim::LogLevel::level, __VA_ARGS__); \
  } while (0)

#endif  // MEMVIRT_SHIM_CORE_LOG_H_

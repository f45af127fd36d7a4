// memtrace-v1: the access trace format of training iterations (JSON Lines,
// optionally gzip-compressed). See docs/policy.md for the format.
//
// Line 1, header: {"format":"memtrace-v1","model":...,"batch":...,"iterations":N}
// Then, in any order but kernels in execution order:
//   {"t":"tensor","id":N,"bytes":B,"kind":"weight|...","persistent":bool}
//   {"t":"kernel","id":K,"name":"...","us":D,"reads":[ids],"writes":[ids]}
//   {"t":"free","tensor":id,"after_kernel":K}
// Unknown members are ignored; unknown "t" values are errors.
//
// Thread safety: stateless functions over plain data.

#ifndef MEMVIRT_TRACE_MEMTRACE_H_
#define MEMVIRT_TRACE_MEMTRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace memvirt::trace {

struct TraceTensor {
  uint64_t id = 0;
  uint64_t bytes = 0;
  std::string kind = "other";  // weight|activation|gradient|workspace|optimizer|other
  bool persistent = false;
};

struct TraceKernel {
  uint64_t id = 0;
  std::string name;
  double us = 0;  // duration in microseconds
  std::vector<uint64_t> reads;
  std::vector<uint64_t> writes;
};

struct TraceFree {
  uint64_t tensor = 0;
  uint64_t after_kernel = 0;  // kernel id
};

struct Trace {
  std::string model;
  int64_t batch = 0;
  int64_t iterations = 1;
  std::string source;
  std::vector<TraceTensor> tensors;  // in file order
  std::vector<TraceKernel> kernels;  // in execution order
  std::vector<TraceFree> frees;
};

// Parses memtrace-v1 text. Errors are InvalidArgument and start with
// "line N:". Validates: header first; unique tensor and kernel ids; bytes > 0;
// kernels and frees reference declared tensors (tensor lines may come after
// the kernels that use them) and frees reference existing kernels.
absl::StatusOr<Trace> ParseTrace(std::string_view text);

// Reads a file, gzip-compressed or plain (detected from content).
absl::StatusOr<Trace> ReadTrace(const std::string& path);

// Writes `trace`; gzip-compressed if `path` ends in ".gz".
absl::Status WriteTrace(const Trace& trace, const std::string& path);

// The text WriteTrace() writes (uncompressed).
std::string FormatTrace(const Trace& trace);

}  // namespace memvirt::trace

#endif  // MEMVIRT_TRACE_MEMTRACE_H_

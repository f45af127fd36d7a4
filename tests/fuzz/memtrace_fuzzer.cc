// libFuzzer target: the memtrace-v1 reader (policy/trace) on arbitrary text.
// Checked: ParseTrace returns a Trace or an InvalidArgument status and never crashes; every
// tensor a parsed trace's kernels and frees name is declared; a parsed trace survives
// FormatTrace -> ParseTrace with the same tensors, kernels and frees.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <unordered_set>

#include "memvirt/trace/memtrace.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using memvirt::trace::Trace;

void CheckReferences(const Trace& t) {
  std::unordered_set<uint64_t> tensors;
  for (const auto& tensor : t.tensors) tensors.insert(tensor.id);
  for (const auto& kernel : t.kernels) {
    for (uint64_t id : kernel.reads) Check(tensors.count(id) == 1);
    for (uint64_t id : kernel.writes) Check(tensors.count(id) == 1);
  }
  for (const auto& free : t.frees) Check(tensors.count(free.tensor) == 1);
}

void CheckRoundTrip(const Trace& t) {
  absl::StatusOr<Trace> again = memvirt::trace::ParseTrace(memvirt::trace::FormatTrace(t));
  Check(again.ok());
  Check(again->tensors.size() == t.tensors.size() && again->kernels.size() == t.kernels.size() &&
        again->frees.size() == t.frees.size());
  for (size_t i = 0; i < t.tensors.size(); ++i) {
    Check(again->tensors[i].id == t.tensors[i].id && again->tensors[i].bytes == t.tensors[i].bytes);
  }
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    Check(again->kernels[i].id == t.kernels[i].id &&
          again->kernels[i].reads == t.kernels[i].reads &&
          again->kernels[i].writes == t.kernels[i].writes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Trace> trace = memvirt::trace::ParseTrace(text);
  if (!trace.ok()) {
    Check(absl::IsInvalidArgument(trace.status()));
    return 0;
  }
  CheckReferences(*trace);
  CheckRoundTrip(*trace);
  return 0;
}

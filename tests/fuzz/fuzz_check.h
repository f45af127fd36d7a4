// The fuzz targets' property check: a violated property aborts, which libFuzzer reports as a
// crash and saves the input (Note [fuzzing] in tests/fuzz/run_fuzzers.sh).
#ifndef MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_
#define MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

namespace memvirt::fuzz {

// Aborts (a finding for libFuzzer) when a property does not hold, naming the line.
inline void CheckAt(bool condition, const char* file, int line) {
  if (!condition) {
    std::fprintf(stderr, "property violated at %s:%d\n", file, line);
    std::abort();
  }
}
#define Check(condition) ::memvirt::fuzz::CheckAt((condition), __FILE__, __LINE__)

}  // namespace memvirt::fuzz

#endif  // MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_

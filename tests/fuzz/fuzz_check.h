// The fuzz targets' property check: a violated property aborts, which libFuzzer reports as a
// crash and saves the input (Note [fuzzing] in tests/fuzz/run_fuzzers.sh).
#ifndef MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_
#define MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdlib>

namespace memvirt::fuzz {

inline void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace memvirt::fuzz

#endif  // MEMVIRT_TESTS_FUZZ_FUZZ_CHECK_H_

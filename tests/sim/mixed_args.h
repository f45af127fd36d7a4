// Output layout of the `mixed_args` test kernel, shared by the kernel module and the
// launch tests so that both sides agree on it. Plain data; no thread-safety concerns.
#ifndef MEMVIRT_TESTS_SIM_MIXED_ARGS_H_
#define MEMVIRT_TESTS_SIM_MIXED_ARGS_H_

#include <cstdint>

namespace memsim_test {

// Mixed scalar layout: the kernel writes its arguments back here so a test can check packing.
struct Mixed {
  char c;
  double d;
  int i;
  short s;
  uint64_t sum;
};

}  // namespace memsim_test

#endif  // MEMVIRT_TESTS_SIM_MIXED_ARGS_H_

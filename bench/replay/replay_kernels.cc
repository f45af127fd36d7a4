// Kernel module of memvirt-replay for the simulated GPU (loaded with
// cuModuleLoad). See replay_abi.h for the argument layout.

#include <time.h>

#include <cstdint>

#include "memsim/kernel.h"
#include "replay_abi.h"

namespace {

double NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

template <typename T>
T Arg(void** params, int i) {
  return *static_cast<T*>(params[i]);
}

}  // namespace

#define U64 sizeof(uint64_t)
#define P16 U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64, U64

MEMSIM_KERNEL(memvirt_replay_kernel, U64, U64, U64, sizeof(uint64_t*), P16, P16, P16) {
  using memvirt::replay::kSlots;
  using memvirt::replay::ReplayPattern;
  const double start = NowNs();
  const uint64_t duration_ns = Arg<uint64_t>(params, 0);
  const uint64_t slots = Arg<uint64_t>(params, 1);
  const uint64_t write_mask = Arg<uint64_t>(params, 2);
  auto* mismatches = Arg<unsigned long long*>(params, 3);
  unsigned long long bad = 0;
  for (int pass = 0; pass < 2; ++pass) {  // verify reads, then write
    for (uint64_t s = 0; s < slots && s < static_cast<uint64_t>(kSlots); ++s) {
      const bool write = (write_mask >> s) & 1;
      if (write != (pass == 1)) continue;
      auto* data = Arg<uint64_t*>(params, 4 + s);
      const uint64_t words = Arg<uint64_t>(params, 4 + kSlots + s) / sizeof(uint64_t);
      const uint64_t tag = Arg<uint64_t>(params, 4 + 2 * kSlots + s);
      if (write) {
        for (uint64_t w = 0; w < words; ++w) data[w] = ReplayPattern(tag, w);
      } else {
        for (uint64_t w = 0; w < words; ++w) bad += data[w] != ReplayPattern(tag, w);
      }
    }
  }
  if (bad != 0) __atomic_fetch_add(mismatches, bad, __ATOMIC_RELAXED);
  // Spend the rest of the kernel's duration without burning a core.
  const double left = static_cast<double>(duration_ns) - (NowNs() - start);
  if (left > 0) {
    timespec ts{static_cast<time_t>(left / 1e9),
                static_cast<long>(static_cast<uint64_t>(left) % 1000000000ULL)};
    nanosleep(&ts, nullptr);
  }
}

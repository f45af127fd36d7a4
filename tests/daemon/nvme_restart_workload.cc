// A process that spills to the NVMe tier across a daemon restart (Note [what a restart keeps] in
// docs/nvme.md). Phase A fills BUFFERS buffers of 8 MiB with patterns and prints "stored A"; it
// then waits for the file GO to exist (the test kills and restarts the daemon meanwhile). Phase
// B fills as many new buffers and reads them back, then reads back phase A's buffers. Output:
//   "b ok=N wrong=W failed=F" and "a ok=N wrong=W lost=L" (lost: the read failed with a CUDA
//   error, as for data the old daemon held).
// Usage: nvme_restart_workload BUFFERS GO
// Exit: 0 when nothing came back wrong, 1 otherwise (3 on OUT_OF_MEMORY while filling).
#include <cuda.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr size_t kBufferBytes = 8 << 20;

// splitmix64 from `seed`: every buffer's bytes differ from every other's.
std::vector<uint64_t> Pattern(uint64_t seed) {
  std::vector<uint64_t> words(kBufferBytes / 8);
  uint64_t state = seed;
  for (uint64_t& w : words) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    w = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  }
  return words;
}

std::vector<CUdeviceptr> Fill(int count, uint64_t first_seed) {
  std::vector<CUdeviceptr> buffers(count);
  for (int i = 0; i < count; ++i) {
    CHECK_CU(cuMemAlloc(&buffers[i], kBufferBytes));
    const std::vector<uint64_t> words = Pattern(first_seed + i);
    CHECK_CU(cuMemcpyHtoD(buffers[i], words.data(), kBufferBytes));
  }
  return buffers;
}

struct Tally {
  int ok = 0, wrong = 0, failed = 0;
};

Tally Verify(const std::vector<CUdeviceptr>& buffers, uint64_t first_seed) {
  Tally t;
  std::vector<uint64_t> got(kBufferBytes / 8);
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (cuMemcpyDtoH(got.data(), buffers[i], kBufferBytes) != CUDA_SUCCESS) {
      ++t.failed;
      continue;
    }
    if (got == Pattern(first_seed + i)) {
      ++t.ok;
    } else {
      ++t.wrong;
    }
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s BUFFERS GO\n", argv[0]);
    return 2;
  }
  const int count = std::atoi(argv[1]);
  SetUpPrimaryContext();
  const std::vector<CUdeviceptr> a = Fill(count, 1000);
  std::printf("stored A\n");
  std::fflush(stdout);
  for (int waited_ms = 0; access(argv[2], F_OK) != 0; waited_ms += 10) {
    if (waited_ms > 120000) {
      std::fprintf(stderr, "no go file\n");
      return 2;
    }
    usleep(10000);
  }
  const std::vector<CUdeviceptr> b = Fill(count, 2000);
  const Tally tb = Verify(b, 2000);
  std::printf("b ok=%d wrong=%d failed=%d\n", tb.ok, tb.wrong, tb.failed);
  const Tally ta = Verify(a, 1000);
  std::printf("a ok=%d wrong=%d lost=%d\n", ta.ok, ta.wrong, ta.failed);
  return tb.wrong == 0 && ta.wrong == 0 ? 0 : 1;
}

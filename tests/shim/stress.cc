// Randomized stress: alloc/free/launch/copy/memset across 3 streams with
// random sizes (log-uniform 1 B .. 64 MiB) and a live footprint of
// OVERSUB x the device memory. Every byte is shadowed on the host; windows
// are read back and compared, and everything is compared at the end.
//
// Usage: stress KERNELS.so OPS DEVICE_BYTES OVERSUB SEED
// Prints "ops N mismatches M peak_live_bytes P"; exit 0 only if M == 0.
#include <cuda.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

struct Buffer {
  CUdeviceptr ptr = 0;
  uint64_t size = 0;
  int stream = 0;
  std::vector<unsigned char> shadow;
};

constexpr uint64_t kMaxBytes = 64ull << 20;
constexpr uint64_t kMaxWindow = 64ull << 10;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s KERNELS.so OPS DEVICE_BYTES OVERSUB SEED\n", argv[0]);
    return 2;
  }
  const uint64_t ops = std::strtoull(argv[2], nullptr, 10);
  const uint64_t device_bytes = std::strtoull(argv[3], nullptr, 10);
  const double oversub = std::atof(argv[4]);
  std::mt19937_64 rng(std::strtoull(argv[5], nullptr, 10));
  const uint64_t live_cap = static_cast<uint64_t>(device_bytes * oversub);

  SetUpPrimaryContext();
  CUmodule mod;
  CHECK_CU(cuModuleLoad(&mod, argv[1]));
  CUfunction mix;
  CHECK_CU(cuModuleGetFunction(&mix, mod, "bytes_mix"));
  CUstream streams[3];
  for (CUstream& s : streams) CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  std::vector<Buffer> live;
  uint64_t live_bytes = 0, peak = 0, mismatches = 0;
  std::vector<unsigned char> scratch(kMaxWindow);
  auto random_size = [&] {
    const double l = std::uniform_real_distribution<double>(0, std::log(double(kMaxBytes)))(rng);
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::exp(l)));
  };
  auto window = [&](const Buffer& b, uint64_t* off, uint64_t* len) {
    *len = 1 + rng() % std::min(b.size, kMaxWindow);
    *off = rng() % (b.size - *len + 1);
  };
  auto free_one = [&](size_t i) {
    Buffer& b = live[i];
    if (rng() % 2 == 0) {
      CHECK_CU(cuMemFreeAsync(b.ptr, streams[b.stream]));
    } else {
      CHECK_CU(cuStreamSynchronize(streams[b.stream]));
      CHECK_CU(cuMemFree(b.ptr));
    }
    live_bytes -= b.size;
    live[i] = std::move(live.back());
    live.pop_back();
  };

  uint64_t done = 0;
  while (done < ops) {
    const int kind = static_cast<int>(rng() % 10);
    if (live.empty() || kind == 0) {  // allocate
      Buffer b;
      b.size = random_size();
      while (live_bytes + b.size > live_cap && !live.empty()) free_one(rng() % live.size());
      CHECK_CU(cuMemAlloc(&b.ptr, b.size));
      b.stream = static_cast<int>(rng() % 3);
      const unsigned char v = static_cast<unsigned char>(rng());
      CHECK_CU(cuMemsetD8Async(b.ptr, v, b.size, streams[b.stream]));
      b.shadow.assign(b.size, v);
      live_bytes += b.size;
      peak = std::max(peak, live_bytes);
      live.push_back(std::move(b));
      ++done;
      continue;
    }
    if (kind == 1 && rng() % 3 == 0) {  // frees are rarer than allocations
      free_one(rng() % live.size());
      ++done;
      continue;
    }
    // A burst of operations on one buffer.
    Buffer& b = live[rng() % live.size()];
    CUstream s = streams[b.stream];
    const int burst = 1 + static_cast<int>(rng() % 8);
    for (int j = 0; j < burst && done < ops; ++j, ++done) {
      uint64_t off, len;
      window(b, &off, &len);
      switch (rng() % 5) {
        case 0: {  // kernel over the whole block's base pointer
          uint32_t k = static_cast<uint32_t>(rng());
          void* args[] = {&b.ptr, &off, &len, &k};
          CHECK_CU(cuLaunchKernel(mix, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
          for (uint64_t i = 0; i < len; ++i) {
            b.shadow[off + i] = static_cast<unsigned char>(b.shadow[off + i] * 3u + k);
          }
          break;
        }
        case 1: {  // host to device
          for (uint64_t i = 0; i < len; ++i) scratch[i] = static_cast<unsigned char>(rng());
          std::memcpy(&b.shadow[off], scratch.data(), len);
          CHECK_CU(cuMemcpyHtoDAsync(b.ptr + off, scratch.data(), len, s));
          CHECK_CU(cuStreamSynchronize(s));  // scratch is reused
          break;
        }
        case 2: {  // memset
          const unsigned char v = static_cast<unsigned char>(rng());
          CHECK_CU(cuMemsetD8Async(b.ptr + off, v, len, s));
          std::memset(&b.shadow[off], v, len);
          break;
        }
        case 3: {  // device to device within the block
          uint64_t dst = rng() % (b.size - len + 1);
          if (dst + len > off && off + len > dst) break;  // no overlap
          CHECK_CU(cuMemcpyDtoDAsync(b.ptr + dst, b.ptr + off, len, s));
          std::memmove(&b.shadow[dst], &b.shadow[off], len);
          break;
        }
        default: {  // read back and compare
          CHECK_CU(cuMemcpyDtoHAsync(scratch.data(), b.ptr + off, len, s));
          CHECK_CU(cuStreamSynchronize(s));
          if (std::memcmp(scratch.data(), &b.shadow[off], len) != 0) ++mismatches;
          break;
        }
      }
    }
  }
  for (Buffer& b : live) {
    std::vector<unsigned char> all(b.size);
    CHECK_CU(cuStreamSynchronize(streams[b.stream]));
    CHECK_CU(cuMemcpyDtoH(all.data(), b.ptr, b.size));
    if (all != b.shadow) ++mismatches;
  }
  CHECK_CU(cuCtxSynchronize());  // a sticky illegal address would surface here
  std::printf("ops %" PRIu64 " mismatches %" PRIu64 " peak_live_bytes %" PRIu64 "\n", done,
              mismatches, peak);
  return mismatches == 0 ? 0 : 1;
}

// Kernels that reach memory through addresses the shim does not see (Note
// [hidden reach] in shim/core/shim_core_hidden_reach.cc), under eviction
// pressure: data blocks of 3x the device are filled only by such kernels
// (`array`: through a pointer array in device memory; `struct`: through an
// address hidden in a 128-byte parameter, like a tensor map's), while
// host-to-device copies on another stream page other blocks in and out.
// Every block is then checked against the pattern computed on the host.
//
// Usage: hidden_pointers KERNELS.so DEVICE_BYTES array|struct
// Prints "rounds R blocks B mismatches M"; a fault exits non-zero.
#include "tests/shim/hidden_pointers.h"

#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

using memvirt::testing::MakeHiddenAddress;
using memvirt::testing::PatternWord;

constexpr uint64_t kBlock = 8ull << 20;
constexpr int kRounds = 2;
constexpr int kWindow = 4;  // blocks filled per launch group

uint64_t Fnv(const unsigned char* x, uint64_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < bytes; ++i) h = (h ^ x[i]) * 1099511628211ull;
  return h;
}

uint64_t PatternFnv(uint64_t seed, uint64_t block) {
  std::vector<unsigned char> bytes(kBlock);
  for (uint64_t i = 0; i < kBlock / 8; ++i) {
    const uint64_t w = PatternWord(seed, block, i);
    std::memcpy(bytes.data() + 8 * i, &w, 8);
  }
  return Fnv(bytes.data(), kBlock);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const uint64_t device_bytes = std::strtoull(argv[2], nullptr, 10);
  const bool array = std::strcmp(argv[3], "array") == 0;
  SetUpPrimaryContext();
  CUmodule mod;
  CHECK_CU(cuModuleLoad(&mod, argv[1]));
  CUfunction fill_indirect, fnv_indirect, fill_hidden, fnv;
  CHECK_CU(cuModuleGetFunction(&fill_indirect, mod, "fill_indirect"));
  CHECK_CU(cuModuleGetFunction(&fnv_indirect, mod, "fnv_indirect"));
  CHECK_CU(cuModuleGetFunction(&fill_hidden, mod, "fill_hidden"));
  CHECK_CU(cuModuleGetFunction(&fnv, mod, "fnv_bytes"));
  CUstream fills, copies;
  CHECK_CU(cuStreamCreate(&fills, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&copies, CU_STREAM_NON_BLOCKING));

  // Data blocks (3x the device, written only through hidden addresses) and
  // pressure blocks (1x the device, written by copies the shim sees).
  const int blocks = static_cast<int>(3 * device_bytes / kBlock);
  const int pressure_blocks = static_cast<int>(device_bytes / kBlock);
  std::vector<CUdeviceptr> data(blocks), pressure(pressure_blocks);
  for (CUdeviceptr& p : data) CHECK_CU(cuMemAlloc(&p, kBlock));
  for (CUdeviceptr& p : pressure) CHECK_CU(cuMemAlloc(&p, kBlock));
  CUdeviceptr table, out;
  CHECK_CU(cuMemAlloc(&table, blocks * sizeof(CUdeviceptr)));
  CHECK_CU(cuMemAlloc(&out, sizeof(uint64_t)));
  CHECK_CU(cuMemcpyHtoD(table, data.data(), blocks * sizeof(CUdeviceptr)));

  std::vector<unsigned char> host(kBlock);
  std::vector<uint64_t> pressure_fnv(pressure_blocks);
  std::mt19937_64 rng(11);
  int mismatches = 0;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t seed = 100 + round;
    for (int w = 0; w < blocks; w += kWindow) {
      // A memset the shim decodes brings the window's blocks to the device,
      // so the fills below write device chunks, which the pressure copies of
      // the next windows find idle by what the shim saw.
      for (int j = w; j < w + kWindow; ++j) CHECK_CU(cuMemsetD8Async(data[j], 0, kBlock, fills));
      uint64_t first = w, count = kWindow, bytes = kBlock, s = seed;
      if (array) {
        void* args[] = {&table, &first, &count, &bytes, &s};
        CHECK_CU(cuLaunchKernel(fill_indirect, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
      } else {
        for (int j = w; j < w + kWindow; ++j) {
          auto hidden = MakeHiddenAddress(data[j], kBlock, j, seed);
          void* args[] = {&hidden};
          CHECK_CU(cuLaunchKernel(fill_hidden, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
        }
      }
      // Pressure while the fills run: copies into pressure blocks page them
      // in, evicting what the shim finds idle (the previous windows).
      for (int k = 0; k < 2; ++k) {
        const int p = (2 * (w / kWindow) + k + round) % pressure_blocks;
        for (auto& b : host) b = static_cast<unsigned char>(rng());
        pressure_fnv[p] = Fnv(host.data(), kBlock);
        CHECK_CU(cuMemcpyHtoDAsync(pressure[p], host.data(), kBlock, copies));
        CHECK_CU(cuStreamSynchronize(copies));  // `host` is reused
      }
    }
    CHECK_CU(cuStreamSynchronize(fills));
    for (int j = 0; j < blocks; ++j) {
      uint64_t index = j, bytes = kBlock;
      if (array) {
        void* args[] = {&out, &table, &index, &bytes};
        CHECK_CU(cuLaunchKernel(fnv_indirect, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
      } else {
        void* args[] = {&out, &data[j], &bytes};
        CHECK_CU(cuLaunchKernel(fnv, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
      }
      uint64_t got = 0;
      CHECK_CU(cuMemcpyDtoHAsync(&got, out, sizeof(got), fills));
      CHECK_CU(cuStreamSynchronize(fills));
      if (got != PatternFnv(seed, j)) {
        std::printf("block %d round %d: wrong checksum\n", j, round);
        ++mismatches;
      }
    }
    for (int p = 0; p < pressure_blocks; ++p) {
      if (pressure_fnv[p] == 0) continue;  // not written yet
      uint64_t bytes = kBlock;
      void* args[] = {&out, &pressure[p], &bytes};
      CHECK_CU(cuLaunchKernel(fnv, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
      uint64_t got = 0;
      CHECK_CU(cuMemcpyDtoHAsync(&got, out, sizeof(got), fills));
      CHECK_CU(cuStreamSynchronize(fills));
      if (got != pressure_fnv[p]) {
        std::printf("pressure block %d round %d: wrong checksum\n", p, round);
        ++mismatches;
      }
    }
  }
  std::printf("rounds %d blocks %d mismatches %d\n", kRounds, blocks, mismatches);
  return mismatches == 0 ? 0 : 1;
}

// Kernels that reach memory through addresses the shim does not see (Note
// [hidden reach] in shim/core/shim_core_hidden_reach.cc), under eviction
// pressure: data blocks of 3x the device are filled only by such kernels,
// while host-to-device copies on another stream page other blocks in and
// out. Every block is then checked against the pattern computed on the host.
// Modes (how the kernels find the data blocks):
//   array   a pointer array in device memory, written by a host-to-device copy
//   struct  an address hidden in a 128-byte parameter, like a tensor map's
//   large   a pointer array written by one copy of more than 64 KiB
//   copy2d  a pointer array written by cuMemcpy2D from pitched host rows
//   device  a pointer array that a kernel copies from another one
//   args    a pointer array that a kernel builds from addresses it is given
//           as plain arguments (recognized only with MEMSHIM_HIDDEN_REACH=all)
//   global  a pointer array in device memory outside the shim's reservation,
//           as a module variable is (cuModuleGetGlobal + cuMemcpyHtoD)
//   graph   as large, each window's memsets and fill captured into a graph
// With `spill` after the mode (under a daemon with an NVMe tier): the data
// blocks (half the device; pressure blocks 3x) are written by copies and
// pushed to the spill tier by pressure first; only then is the pointer array
// written, and the blocks are read through it (except in graph mode, whose
// graphs reach them first) and refilled through it without memsets, so no
// operation names them.
//
// Usage: hidden_pointers KERNELS.so DEVICE_BYTES MODE [spill]
// Prints "rounds R blocks B mismatches M"; a fault exits non-zero.
#include "tests/shim/hidden_pointers.h"

#include <cuda.h>

#include <algorithm>
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
  const std::string mode = argv[3];
  const bool hidden_struct = mode == "struct", global = mode == "global", graph = mode == "graph";
  const bool spill = argc > 4 && std::string(argv[4]) == "spill";
  SetUpPrimaryContext();
  CUmodule mod;
  CHECK_CU(cuModuleLoad(&mod, argv[1]));
  CUfunction fill_indirect, fnv_indirect, fill_hidden, fnv, copy_words, store_addresses;
  CHECK_CU(cuModuleGetFunction(&fill_indirect, mod, "fill_indirect"));
  CHECK_CU(cuModuleGetFunction(&fnv_indirect, mod, "fnv_indirect"));
  CHECK_CU(cuModuleGetFunction(&fill_hidden, mod, "fill_hidden"));
  CHECK_CU(cuModuleGetFunction(&fnv, mod, "fnv_bytes"));
  CHECK_CU(cuModuleGetFunction(&copy_words, mod, "copy_words"));
  CHECK_CU(cuModuleGetFunction(&store_addresses, mod, "store_addresses"));
  CUstream fills, copies;
  CHECK_CU(cuStreamCreate(&fills, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&copies, CU_STREAM_NON_BLOCKING));

  CUdeviceptr external_table = 0;
  if (global) {  // created first, while the device has room for it
    // As a module variable is (the simulated driver keeps those of its
    // shared-object modules in host memory): device memory outside the
    // shim's reservation, here the program's own VMM mapping, passed through
    // by the shim; the kernels read it by its address, which is no block.
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle handle;
    CHECK_CU(cuMemCreate(&handle, granularity, &prop, 0));
    CHECK_CU(cuMemAddressReserve(&external_table, granularity, 0, 0, 0));
    CHECK_CU(cuMemMap(external_table, granularity, 0, handle, 0));
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(external_table, granularity, &access, 1));
  }
  // Data blocks (3x the device, written only through hidden addresses; half
  // the device in `spill` mode) and pressure blocks (1x the device, written by copies the
  // shim sees; 3x in `spill` mode).
  const int blocks = static_cast<int>((spill ? device_bytes / 2 : 3 * device_bytes) / kBlock);
  const int pressure_blocks = static_cast<int>((spill ? 3 : 1) * device_bytes / kBlock);
  std::vector<CUdeviceptr> data(blocks), pressure(pressure_blocks);
  for (CUdeviceptr& p : data) CHECK_CU(cuMemAlloc(&p, kBlock));
  for (CUdeviceptr& p : pressure) CHECK_CU(cuMemAlloc(&p, kBlock));
  CUdeviceptr out;
  CHECK_CU(cuMemAlloc(&out, sizeof(uint64_t)));
  std::vector<unsigned char> host(kBlock);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> pressure_fnv(pressure_blocks);
  auto press = [&](int p) {
    for (auto& b : host) b = static_cast<unsigned char>(rng());
    pressure_fnv[p] = Fnv(host.data(), kBlock);
    CHECK_CU(cuMemcpyHtoDAsync(pressure[p], host.data(), kBlock, copies));
    CHECK_CU(cuStreamSynchronize(copies));  // `host` is reused
  };
  if (spill) {
    // Written by copies (decoded), then pushed below device and host memory.
    for (int j = 0; j < blocks; ++j) {
      for (uint64_t i = 0; i < kBlock / 8; ++i) {
        const uint64_t w = PatternWord(99, j, i);
        std::memcpy(host.data() + 8 * i, &w, 8);
      }
      CHECK_CU(cuMemcpyHtoD(data[j], host.data(), kBlock));
    }
    for (int p = 0; p < pressure_blocks; ++p) press(p);
  }

  // The pointer array the kernels read (`table`), written as the mode says.
  CUdeviceptr table = 0, table_source = 0;
  if (global) {
    table = external_table;
    CHECK_CU(cuMemcpyHtoD(table, data.data(), blocks * sizeof(CUdeviceptr)));
  } else if (mode == "large" || graph) {
    std::vector<CUdeviceptr> padded(std::max(blocks, 16384), 0);  // 128 KiB
    std::copy(data.begin(), data.end(), padded.begin());
    CHECK_CU(cuMemAlloc(&table, padded.size() * sizeof(CUdeviceptr)));
    CHECK_CU(cuMemcpyHtoD(table, padded.data(), padded.size() * sizeof(CUdeviceptr)));
  } else if (mode == "copy2d") {
    // Rows of kWindow addresses, every other host row of padding.
    const size_t width = kWindow * sizeof(CUdeviceptr);
    const size_t rows = blocks / kWindow;
    std::vector<CUdeviceptr> pitched(2 * blocks, 0);
    for (size_t r = 0; r < rows; ++r) {
      std::copy(data.begin() + r * kWindow, data.begin() + (r + 1) * kWindow,
                pitched.begin() + 2 * r * kWindow);
    }
    CHECK_CU(cuMemAlloc(&table, blocks * sizeof(CUdeviceptr)));
    CUDA_MEMCPY2D c = {};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = pitched.data();
    c.srcPitch = 2 * width;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = table;
    c.dstPitch = width;
    c.WidthInBytes = width;
    c.Height = rows;
    CHECK_CU(cuMemcpy2D(&c));
  } else if (mode == "args") {
    CHECK_CU(cuMemAlloc(&table, blocks * sizeof(CUdeviceptr)));
    for (int w = 0; w < blocks; w += kWindow) {
      uint64_t first = w;
      void* args[] = {&table, &first, &data[w], &data[w + 1], &data[w + 2], &data[w + 3]};
      CHECK_CU(cuLaunchKernel(store_addresses, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
    }
    CHECK_CU(cuStreamSynchronize(fills));
  } else if (mode == "device") {
    CHECK_CU(cuMemAlloc(&table_source, blocks * sizeof(CUdeviceptr)));
    CHECK_CU(cuMemcpyHtoD(table_source, data.data(), blocks * sizeof(CUdeviceptr)));
    CHECK_CU(cuMemAlloc(&table, blocks * sizeof(CUdeviceptr)));
    uint64_t count = blocks;
    void* args[] = {&table, &table_source, &count};
    CHECK_CU(cuLaunchKernel(copy_words, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
    CHECK_CU(cuStreamSynchronize(fills));
  } else {
    CHECK_CU(cuMemAlloc(&table, blocks * sizeof(CUdeviceptr)));
    CHECK_CU(cuMemcpyHtoD(table, data.data(), blocks * sizeof(CUdeviceptr)));
  }
  auto fill = [&](uint64_t first, uint64_t count, uint64_t seed) {
    uint64_t bytes = kBlock;
    if (hidden_struct) {
      for (uint64_t j = first; j < first + count; ++j) {
        auto hidden = MakeHiddenAddress(data[j], kBlock, j, seed);
        void* args[] = {&hidden};
        CHECK_CU(cuLaunchKernel(fill_hidden, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
      }
    } else {
      void* args[] = {&table, &first, &count, &bytes, &seed};
      CHECK_CU(cuLaunchKernel(fill_indirect, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
    }
  };
  // *out = FNV of data block j, read through the hidden address.
  auto read = [&](uint64_t j) {
    uint64_t bytes = kBlock;
    if (hidden_struct) {
      void* args[] = {&out, &data[j], &bytes};
      CHECK_CU(cuLaunchKernel(fnv, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
    } else {
      void* args[] = {&out, &table, &j, &bytes};
      CHECK_CU(cuLaunchKernel(fnv_indirect, 1, 1, 1, 1, 1, 1, 0, fills, args, nullptr));
    }
    uint64_t got = 0;
    CHECK_CU(cuMemcpyDtoHAsync(&got, out, sizeof(got), fills));
    CHECK_CU(cuStreamSynchronize(fills));
    return got;
  };

  int mismatches = 0;
  if (spill && !graph) {
    // The blocks come back from the spill tier for the kernels that reach
    // them through the array.
    for (int j = 0; j < blocks; ++j) {
      if (read(j) != PatternFnv(99, j)) {
        std::printf("block %d: wrong checksum after the spill tier\n", j);
        ++mismatches;
      }
    }
  }
  std::vector<CUgraphExec> execs;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t seed = 100 + round;
    for (int w = 0; w < blocks; w += kWindow) {
      // A memset the shim decodes brings the window's blocks to the device,
      // so the fills below write device chunks, which the pressure copies of
      // the next windows find idle by what the shim saw.
      if (graph) CHECK_CU(cuStreamBeginCapture(fills, CU_STREAM_CAPTURE_MODE_GLOBAL));
      for (int j = w; j < w + kWindow && !spill; ++j) {
        CHECK_CU(cuMemsetD8Async(data[j], 0, kBlock, fills));
      }
      fill(w, kWindow, seed);
      if (graph) {
        CUgraph g;
        CUgraphExec exec;
        CHECK_CU(cuStreamEndCapture(fills, &g));
        CHECK_CU(cuGraphInstantiate(&exec, g, 0));
        CHECK_CU(cuGraphDestroy(g));
        CHECK_CU(cuGraphLaunch(exec, fills));
        execs.push_back(exec);
      }
      // Pressure while the fills run: copies into pressure blocks page them
      // in, evicting what the shim finds idle (the previous windows).
      for (int k = 0; k < 2; ++k) press((2 * (w / kWindow) + k + round) % pressure_blocks);
    }
    CHECK_CU(cuStreamSynchronize(fills));
    for (CUgraphExec exec : execs) CHECK_CU(cuGraphExecDestroy(exec));
    execs.clear();
    for (int j = 0; j < blocks; ++j) {
      if (read(j) != PatternFnv(seed, j)) {
        std::printf("block %d round %d: wrong checksum\n", j, round);
        ++mismatches;
      }
    }
    // Pressure blocks are read back by copies: no kernel is given them.
    for (int p = 0; p < pressure_blocks; ++p) {
      if (pressure_fnv[p] == 0) continue;  // not written yet
      CHECK_CU(cuMemcpyDtoHAsync(host.data(), pressure[p], kBlock, copies));
      CHECK_CU(cuStreamSynchronize(copies));
      if (Fnv(host.data(), kBlock) != pressure_fnv[p]) {
        std::printf("pressure block %d round %d: wrong checksum\n", p, round);
        ++mismatches;
      }
    }
  }
  std::printf("rounds %d blocks %d mismatches %d\n", kRounds, blocks, mismatches);
  return mismatches == 0 ? 0 : 1;
}

// Allocates blocks alternately on two devices, writing a pattern into each,
// until cuMemAlloc refuses one; then reads every block back. Under the shim
// the refusal must come at cuMemAlloc (Note [shared admission] in
// shim/core/overflow_ledger.h), never as a failed write of a block that was
// admitted.
//
// Usage: admission_limit BLOCK_BYTES MAX_BLOCKS
// Prints "refused_at N result R" (N = index of the refused allocation, or
// "none"), "other_device_result R" (one more allocation on the other device
// after the refusal), "device D reported_free F", "blocks N mismatches M".
// Exit: 0 ok, 4 a write or read of an admitted block failed, 1 other error.
#include <cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr int kExitAdmittedBlockFailed = 4;

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void Pattern(std::vector<uint64_t>* words, uint64_t seed) {
  for (size_t i = 0; i < words->size(); ++i) (*words)[i] = Mix(seed * 0x100000001ull + i);
}

struct Block {
  int device;
  CUdeviceptr ptr;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s BLOCK_BYTES MAX_BLOCKS\n", argv[0]);
    return 2;
  }
  const uint64_t block_bytes = std::strtoull(argv[1], nullptr, 10);
  const int max_blocks = std::atoi(argv[2]);
  const std::vector<CUcontext> ctx = RetainPrimaryContexts(2);

  std::vector<uint64_t> words(block_bytes / sizeof(uint64_t));
  std::vector<Block> blocks;
  int refused_at = -1;
  int refused_device = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const int d = i % 2;
    CHECK_CU(cuCtxSetCurrent(ctx[d]));
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc(&p, block_bytes);
    if (r != CUDA_SUCCESS) {
      std::printf("refused_at %d result %d\n", i, static_cast<int>(r));
      refused_at = i;
      refused_device = d;
      break;
    }
    Pattern(&words, i);
    const CUresult w = cuMemcpyHtoD(p, words.data(), block_bytes);
    if (w != CUDA_SUCCESS) {
      std::printf("write_failed %d result %d\n", i, static_cast<int>(w));
      return kExitAdmittedBlockFailed;
    }
    blocks.push_back({d, p});
  }
  if (refused_at < 0) std::printf("refused_at none\n");
  if (refused_at >= 0) {
    const int other = 1 - refused_device;
    CHECK_CU(cuCtxSetCurrent(ctx[other]));
    CUdeviceptr p = 0;
    const CUresult r = cuMemAlloc(&p, block_bytes);
    std::printf("other_device_result %d\n", static_cast<int>(r));
    if (r == CUDA_SUCCESS) CHECK_CU(cuMemFree(p));
  }
  for (int d = 0; d < 2; ++d) {
    CHECK_CU(cuCtxSetCurrent(ctx[d]));
    size_t free_bytes = 0, total_bytes = 0;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
    std::printf("device %d reported_free %zu reported_total %zu\n", d, free_bytes, total_bytes);
  }

  // Every admitted block kept its bytes.
  std::vector<uint64_t> expected(words.size());
  int mismatches = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    CHECK_CU(cuCtxSetCurrent(ctx[blocks[i].device]));
    const CUresult r = cuMemcpyDtoH(words.data(), blocks[i].ptr, block_bytes);
    if (r != CUDA_SUCCESS) {
      std::printf("read_failed %zu result %d\n", i, static_cast<int>(r));
      return kExitAdmittedBlockFailed;
    }
    Pattern(&expected, i);
    if (words != expected) ++mismatches;
  }
  std::printf("blocks %zu mismatches %d\n", blocks.size(), mismatches);
  for (const Block& b : blocks) {
    CHECK_CU(cuCtxSetCurrent(ctx[b.device]));
    CHECK_CU(cuMemFree(b.ptr));
  }
  return 0;
}

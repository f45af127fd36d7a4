// One process on two devices sharing a host budget, without a spill tier:
// device 1 allocates and writes FIRST_BLOCKS blocks, then frees the last
// FREED of them (the ones written last); device 0 then allocates and writes
// SECOND_BLOCKS blocks; every block still allocated is read back. Under the
// shim with device and host budgets chosen so that device 1's writes fill the
// whole host budget and what both devices commit beyond their device budgets
// after the frees fits it exactly, device 0's allocations need the admission
// device 1's frees gave back (Note [frees of other cores]) and its writes
// need host slots that device 1's data holds (Note [host slots of other
// cores], both in shim/core/host_peers.h): no write of an admitted block may
// fail.
//
// Usage: host_handoff BLOCK_BYTES FIRST_BLOCKS FREED SECOND_BLOCKS
// Prints "blocks N mismatches M".
// Exit: 0 ok, 4 a write or read of an admitted block failed, 3 an allocation
// was refused (out of memory), 1 other error.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr int kExitAdmittedBlockFailed = 4;

struct Block {
  int device;
  CUdeviceptr ptr;
  uint64_t seed;
};

void Pattern(std::vector<uint64_t>* words, uint64_t seed) {
  for (size_t i = 0; i < words->size(); ++i) {
    (*words)[i] = (seed << 32) ^ (i * 0x9e3779b97f4a7c15ull);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s BLOCK_BYTES FIRST_BLOCKS FREED SECOND_BLOCKS\n", argv[0]);
    return 2;
  }
  const uint64_t block_bytes = std::strtoull(argv[1], nullptr, 10);
  const int first_blocks = std::atoi(argv[2]);
  const int freed = std::atoi(argv[3]);
  const int second_blocks = std::atoi(argv[4]);
  if (freed > first_blocks) {
    std::fprintf(stderr, "FREED exceeds FIRST_BLOCKS\n");
    return 2;
  }
  const std::vector<CUcontext> ctx = RetainPrimaryContexts(2);

  std::vector<uint64_t> words(block_bytes / sizeof(uint64_t));
  std::vector<Block> blocks;
  uint64_t next_seed = 1;
  auto allocate_and_write = [&](int device, int n) {
    CHECK_CU(cuCtxSetCurrent(ctx[device]));
    for (int i = 0; i < n; ++i) {
      Block b = {device, 0, next_seed++};
      CHECK_CU(cuMemAlloc(&b.ptr, block_bytes));
      Pattern(&words, b.seed);
      if (const CUresult r = cuMemcpyHtoD(b.ptr, words.data(), block_bytes); r != CUDA_SUCCESS) {
        std::printf("write_failed device %d block %d result %d\n", device, i, static_cast<int>(r));
        std::exit(kExitAdmittedBlockFailed);
      }
      blocks.push_back(b);
    }
  };
  allocate_and_write(1, first_blocks);
  for (int i = 0; i < freed; ++i) {
    CHECK_CU(cuMemFree(blocks.back().ptr));
    blocks.pop_back();
  }
  allocate_and_write(0, second_blocks);

  std::vector<uint64_t> expected(words.size());
  int mismatches = 0;
  for (const Block& b : blocks) {
    CHECK_CU(cuCtxSetCurrent(ctx[b.device]));
    if (const CUresult r = cuMemcpyDtoH(words.data(), b.ptr, block_bytes); r != CUDA_SUCCESS) {
      std::printf("read_failed device %d result %d\n", b.device, static_cast<int>(r));
      return kExitAdmittedBlockFailed;
    }
    Pattern(&expected, b.seed);
    if (words != expected) ++mismatches;
  }
  std::printf("blocks %zu mismatches %d\n", blocks.size(), mismatches);
  for (const Block& b : blocks) {
    CHECK_CU(cuCtxSetCurrent(ctx[b.device]));
    CHECK_CU(cuMemFree(b.ptr));
  }
  return 0;
}

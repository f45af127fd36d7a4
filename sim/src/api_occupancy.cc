// Exported entry points: the occupancy calculator (cuOccupancy*).
//
// Note [occupancy model]: the answers follow the simulated device's attributes (device.cc:
// 2048 threads, 32 blocks, 65536 registers and 233472 bytes of shared memory per SM, 1024 bytes
// reserved per block, 132 SMs) and the kernel's attributes (cuFuncGetAttribute: registers per
// thread, static shared memory, maximum block size). Registers and shared memory are counted
// without allocation granularity; clusters use the portable maximum of 8 blocks. Kernels run on
// the CPU, so the numbers only need to be plausible and self-consistent for runtimes and
// frameworks that size their launches with them.
#include <algorithm>

#include "api_common.h"

using namespace memsim::api;

namespace {

constexpr int kThreadsPerSm = 2048;
constexpr int kBlocksPerSm = 32;
constexpr int kRegistersPerSm = 65536;
constexpr size_t kSharedPerSm = 233472;
constexpr size_t kSharedReservedPerBlock = 1024;
constexpr size_t kSharedPerBlockOptIn = 232448;
constexpr int kSmCount = 132;
constexpr int kWarpSize = 32;
constexpr int kPortableClusterSize = 8;

struct KernelResources {
  int registers_per_thread = 0;
  size_t static_shared = 0;
  int max_threads_per_block = 0;
};

CUresult Attribute(CUfunction f, CUfunction_attribute attr, int* value) {
  if (cuFuncGetAttribute(value, attr, f) == CUDA_SUCCESS) return CUDA_SUCCESS;
  CUdevice device;
  if (CUresult r = cuCtxGetDevice(&device)) return r;
  return cuKernelGetAttribute(value, attr, reinterpret_cast<CUkernel>(f), device);
}

CUresult Resources(CUfunction f, KernelResources* out) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int shared = 0;
  if (CUresult r = Attribute(f, CU_FUNC_ATTRIBUTE_NUM_REGS, &out->registers_per_thread)) return r;
  if (CUresult r = Attribute(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &shared)) return r;
  if (CUresult r =
          Attribute(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &out->max_threads_per_block)) {
    return r;
  }
  out->static_shared = static_cast<size_t>(shared);
  return CUDA_SUCCESS;
}

int RoundUpToWarp(int threads) { return (threads + kWarpSize - 1) / kWarpSize * kWarpSize; }

// Resident blocks per SM for a block of `block_size` threads using `dynamic_shared` bytes.
int BlocksPerSm(const KernelResources& k, int block_size, size_t dynamic_shared) {
  if (block_size <= 0 || block_size > k.max_threads_per_block) return 0;
  const size_t shared = k.static_shared + dynamic_shared;
  if (shared > kSharedPerBlockOptIn) return 0;
  const int threads = RoundUpToWarp(block_size);
  int blocks = std::min(kBlocksPerSm, kThreadsPerSm / threads);
  if (k.registers_per_thread > 0) {
    blocks = std::min(blocks, kRegistersPerSm / (k.registers_per_thread * threads));
  }
  blocks = std::min<int>(blocks, kSharedPerSm / (shared + kSharedReservedPerBlock));
  return blocks;
}

CUresult MaxActiveBlocks(int* num_blocks, CUfunction f, int block_size, size_t dynamic_shared,
                         unsigned flags) {
  if (CUresult r = RequireInit()) return r;
  if (num_blocks == nullptr || (flags & ~CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  KernelResources k;
  if (CUresult r = Resources(f, &k)) return r;
  *num_blocks = BlocksPerSm(k, block_size, dynamic_shared);
  return CUDA_SUCCESS;
}

CUresult MaxPotentialBlockSize(int* min_grid_size, int* block_size, CUfunction f,
                               CUoccupancyB2DSize shared_of_block, size_t dynamic_shared,
                               int block_size_limit, unsigned flags) {
  if (CUresult r = RequireInit()) return r;
  if (min_grid_size == nullptr || block_size == nullptr ||
      (flags & ~CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  KernelResources k;
  if (CUresult r = Resources(f, &k)) return r;
  int limit = k.max_threads_per_block;
  if (block_size_limit > 0) limit = std::min(limit, block_size_limit);
  int best_size = 0, best_blocks = 0, best_threads = 0;
  for (int size = RoundUpToWarp(limit); size > 0; size -= kWarpSize) {
    const int candidate = std::min(size, limit);
    const size_t shared = shared_of_block != nullptr ? shared_of_block(candidate) : dynamic_shared;
    const int blocks = BlocksPerSm(k, candidate, shared);
    if (blocks * candidate > best_threads) {
      best_threads = blocks * candidate;
      best_size = candidate;
      best_blocks = blocks;
    }
  }
  *block_size = best_size;
  *min_grid_size = best_blocks * kSmCount;
  return CUDA_SUCCESS;
}

// Cluster dimensions from a launch configuration's attributes; 0 when none is given.
int ClusterSize(const CUlaunchConfig* config) {
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& d = config->attrs[i].value.clusterDim;
      return static_cast<int>(d.x * d.y * d.z);
    }
  }
  return 0;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func,
                                                             int blockSize,
                                                             size_t dynamicSMemSize) {
  return MaxActiveBlocks(numBlocks, func, blockSize, dynamicSMemSize, CU_OCCUPANCY_DEFAULT);
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    int* numBlocks, CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags) {
  return MaxActiveBlocks(numBlocks, func, blockSize, dynamicSMemSize, flags);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction func,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
  return MaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, CU_OCCUPANCY_DEFAULT);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(
    int* minGridSize, int* blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags) {
  return MaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, flags);
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                         int numBlocks, int blockSize) {
  if (CUresult r = RequireInit()) return r;
  if (dynamicSmemSize == nullptr || numBlocks <= 0) return CUDA_ERROR_INVALID_VALUE;
  KernelResources k;
  if (CUresult r = Resources(func, &k)) return r;
  if (BlocksPerSm(k, blockSize, 0) < numBlocks) {
    *dynamicSmemSize = 0;
    return CUDA_SUCCESS;
  }
  const size_t per_block = kSharedPerSm / static_cast<size_t>(numBlocks);
  const size_t overhead = kSharedReservedPerBlock + k.static_shared;
  const size_t available = per_block > overhead ? per_block - overhead : 0;
  *dynamicSmemSize =
      std::min(available, kSharedPerBlockOptIn - std::min(kSharedPerBlockOptIn, k.static_shared));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction func,
                                                    const CUlaunchConfig* config) {
  if (CUresult r = RequireInit()) return r;
  if (clusterSize == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelResources k;
  if (CUresult r = Resources(func, &k)) return r;
  const int block = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
  *clusterSize = BlocksPerSm(k, block, config->sharedMemBytes) > 0 ? kPortableClusterSize : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                              const CUlaunchConfig* config) {
  if (CUresult r = RequireInit()) return r;
  if (numClusters == nullptr || config == nullptr ||
      (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  KernelResources k;
  if (CUresult r = Resources(func, &k)) return r;
  const int cluster = ClusterSize(config);
  if (cluster <= 0 || cluster > kPortableClusterSize) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  const int block = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
  *numClusters = BlocksPerSm(k, block, config->sharedMemBytes) * kSmCount / cluster;
  return CUDA_SUCCESS;
}

}  // extern "C"

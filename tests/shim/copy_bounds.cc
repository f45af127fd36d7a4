// Copies and memsets that run past the end of their allocation (Note [copy
// ranges] in shim/core/shim_core.h). Prints "<case> <CUresult>" for each,
// then whether the allocations next to the targets kept their bytes and the
// result of a valid call made afterwards (the context must not be poisoned).
//
// Usage: copy_bounds
// Exit: 0 (the harness compares the output with and without the shim).
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr size_t kMiB = 1 << 20;

uint64_t Checksum(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Fills `ptr` with a pattern and returns its checksum.
uint64_t Fill(CUdeviceptr ptr, size_t bytes, unsigned char seed) {
  std::vector<unsigned char> host(bytes);
  for (size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(i * 31 + seed);
  CHECK_CU(cuMemcpyHtoD(ptr, host.data(), bytes));
  return Checksum(host);
}

uint64_t Read(CUdeviceptr ptr, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  CHECK_CU(cuMemcpyDtoH(host.data(), ptr, bytes));
  return Checksum(host);
}

void Report(const char* name, CUresult r) { std::printf("%s %d\n", name, static_cast<int>(r)); }

}  // namespace

int main() {
  SetUpPrimaryContext();
  // Two 2 MiB allocations, two 4 KiB ones, and a 4 MiB destination; every
  // allocation is filled, and each bad call's neighbours are checked.
  CUdeviceptr big[2], small[2], dst;
  for (CUdeviceptr& p : big) CHECK_CU(cuMemAlloc(&p, 2 * kMiB));
  for (CUdeviceptr& p : small) CHECK_CU(cuMemAlloc(&p, 4096));
  CHECK_CU(cuMemAlloc(&dst, 4 * kMiB));
  const uint64_t big_sum[2] = {Fill(big[0], 2 * kMiB, 1), Fill(big[1], 2 * kMiB, 2)};
  const uint64_t small_sum[2] = {Fill(small[0], 4096, 3), Fill(small[1], 4096, 4)};
  const uint64_t dst_sum = Fill(dst, 4 * kMiB, 5);
  std::vector<unsigned char> host(8 * 4096, 0xab);

  // Host-to-device past the end of a 2 MiB allocation.
  Report("htod_past_end", cuMemcpyHtoD(big[0] + 2 * kMiB - 4096, host.data(), 8192));
  Report("htod_async_past_end",
         cuMemcpyHtoDAsync(big[0] + 2 * kMiB - 4096, host.data(), 8192, nullptr));
  // 8 KiB through cuMemcpy2D into a 4 KiB allocation.
  CUDA_MEMCPY2D copy = {};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = host.data();
  copy.srcPitch = 4096;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = small[0];
  copy.dstPitch = 4096;
  copy.WidthInBytes = 4096;
  copy.Height = 2;
  Report("memcpy2d_8k_into_4k", cuMemcpy2D(&copy));
  // Reading past the end of an allocation.
  Report("dtod_read_past_end", cuMemcpyDtoD(dst, big[0] + kMiB, 2 * kMiB));
  Report("memcpy_read_past_end", cuMemcpy(dst, big[0] + kMiB, 2 * kMiB));
  Report("dtoh_read_past_end", cuMemcpyDtoH(host.data(), small[0] + 2048, 4096));
  // Lengths no allocation can have.
  Report("htod_size_max", cuMemcpyHtoD(big[0], host.data(), SIZE_MAX));
  Report("dtod_wraps_address_space", cuMemcpyDtoD(dst, big[0], SIZE_MAX - big[0] + 4097));
  // Memsets past the end.
  Report("memset_d8_past_end", cuMemsetD8(big[0] + 2 * kMiB - 16, 0, 32));
  Report("memset_d32_overflowing_count", cuMemsetD32(small[0], 0, SIZE_MAX / 2));

  // Nothing was written anywhere, and the context still works.
  std::printf("neighbours %s\n", Read(big[1], 2 * kMiB) == big_sum[1] &&
                                         Read(small[1], 4096) == small_sum[1] &&
                                         Read(dst, 4 * kMiB) == dst_sum
                                     ? "unchanged"
                                     : "changed");
  std::printf("targets %s\n",
              Read(big[0], 2 * kMiB) == big_sum[0] && Read(small[0], 4096) == small_sum[0]
                  ? "unchanged"
                  : "changed");
  Report("valid_copy_after", cuMemcpyDtoD(dst, big[0], 2 * kMiB));
  Report("synchronize_after", cuCtxSynchronize());
  return 0;
}

// A training-like workload on the driver API: persistent weights, gradients
// and momentum per layer; activations allocated in forward and freed in
// backward. Prints one checksum over the final weights and momentum.
//
// Usage: train_workload KERNELS.so FOOTPRINT_BYTES [ITERATIONS [vmm]]
// With "vmm" the input and the first layer's weights are allocated the way
// frameworks' expandable segments do: with the VMM API, by the program itself.
// Exit: 0 ok, 3 out of memory, 1 other error.
#include <cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"
#include "tests/shim/train_kernels.h"

namespace {

// Own reservation, physical memory from cuMemCreate, mapped and made
// accessible by the program (not by cuMemAlloc).
CUdeviceptr AllocWithVmm(uint64_t bytes) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const uint64_t size = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr ptr;
  CHECK_CU(cuMemAddressReserve(&ptr, size, 0, 0, 0));
  CUmemGenericAllocationHandle handle;
  CHECK_CU(cuMemCreate(&handle, size, &prop, 0));
  CHECK_CU(cuMemMap(ptr, size, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(ptr, size, &access, 1));
  return ptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s KERNELS.so FOOTPRINT_BYTES [ITERATIONS]\n", argv[0]);
    return 2;
  }
  const uint64_t footprint = std::strtoull(argv[2], nullptr, 10);
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 3;
  const bool app_vmm = argc > 4 && std::string(argv[4]) == "vmm";
  constexpr int kLayers = kTrainLayers;
  uint64_t layer_bytes = TrainLayerBytes(footprint);
  uint64_t n = layer_bytes / sizeof(float);

  SetUpPrimaryContext();
  const TrainKernels k = LoadTrainKernels(argv[1]);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUdeviceptr input;
  if (app_vmm) {
    input = AllocWithVmm(layer_bytes);
  } else {
    CHECK_CU(cuMemAlloc(&input, layer_bytes));
  }
  uint64_t seed = 1;
  Launch(k.init, s, {&input, &n, &seed});
  std::vector<CUdeviceptr> w(kLayers), g(kLayers), m(kLayers), a(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    if (app_vmm && l == 0) {
      w[l] = AllocWithVmm(layer_bytes);
    } else {
      CHECK_CU(cuMemAlloc(&w[l], layer_bytes));
    }
    CHECK_CU(cuMemAlloc(&g[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&m[l], layer_bytes));
    uint64_t layer_seed = 100 + l;
    Launch(k.init, s, {&w[l], &n, &layer_seed});
    CHECK_CU(cuMemsetD32Async(m[l], 0, n, s));
  }
  for (int it = 0; it < iterations; ++it) {
    for (int l = 0; l < kLayers; ++l) {
      CHECK_CU(cuMemAlloc(&a[l], layer_bytes));  // activation lives until backward
      CUdeviceptr in = l == 0 ? input : a[l - 1];
      Launch(k.forward, s, {&a[l], &in, &w[l], &n});
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      Launch(k.backward, s, {&g[l], &a[l], &w[l], &n});
      Launch(k.sgd, s, {&w[l], &m[l], &g[l], &n});
      CHECK_CU(cuStreamSynchronize(s));
      CHECK_CU(cuMemFree(a[l]));
    }
  }
  CUdeviceptr sums;
  CHECK_CU(cuMemAlloc(&sums, 2 * kLayers * sizeof(uint64_t)));
  for (int l = 0; l < kLayers; ++l) {
    CUdeviceptr ws = sums + (2 * l) * sizeof(uint64_t);
    CUdeviceptr ms = sums + (2 * l + 1) * sizeof(uint64_t);
    Launch(k.fnv, s, {&ws, &w[l], &layer_bytes});
    Launch(k.fnv, s, {&ms, &m[l], &layer_bytes});
  }
  std::vector<uint64_t> host(2 * kLayers);
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemcpyDtoH(host.data(), sums, host.size() * sizeof(uint64_t)));
  uint64_t total = 1469598103934665603ull;
  for (uint64_t h : host) total = (total ^ h) * 1099511628211ull;
  CHECK_CU(cuCtxSynchronize());
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
  std::printf("checksum %016" PRIx64 "\n", total);
  std::printf("layer_bytes %" PRIu64 " peak_bytes %" PRIu64 " reported_total %zu\n", layer_bytes,
              layer_bytes * (4 * kLayers + 1), total_bytes);
  return 0;
}

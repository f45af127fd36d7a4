// The training-like workload of train_workload.cc as CUDA graphs: one graph
// per layer is captured from a stream (a memset, forward, backward and SGD
// kernels, and for the last layer a device-to-device copy that feeds its
// output back as the next input), instantiated once and launched every
// iteration. Each graph touches a fraction of the memory; all graphs together
// touch FOOTPRINT_BYTES. Prints one checksum over the final weights, momentum
// and input.
//
// Usage: graph_workload KERNELS.so FOOTPRINT_BYTES [ITERATIONS [blocking]]
// With "blocking" the graphs are captured on a blocking stream while the
// initialization, issued on the legacy default stream, may still be running
// (the legacy stream must then stay untouched until the captures end).
// Exit: 0 ok, 3 out of memory, 1 other error.
#include <cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"
#include "tests/shim/train_kernels.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s KERNELS.so FOOTPRINT_BYTES [ITERATIONS]\n", argv[0]);
    return 2;
  }
  const uint64_t footprint = std::strtoull(argv[2], nullptr, 10);
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 3;
  const bool blocking = argc > 4 && std::string(argv[4]) == "blocking";
  constexpr int kLayers = kTrainLayers;
  uint64_t layer_bytes = TrainLayerBytes(footprint);
  uint64_t n = layer_bytes / sizeof(float);

  SetUpPrimaryContext();
  const TrainKernels k = LoadTrainKernels(argv[1]);
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, blocking ? 0 : CU_STREAM_NON_BLOCKING));
  CUstream init = blocking ? nullptr : s;

  CUdeviceptr input;
  CHECK_CU(cuMemAlloc(&input, layer_bytes));
  uint64_t seed = 1;
  Launch(k.init, init, {&input, &n, &seed});
  std::vector<CUdeviceptr> w(kLayers), g(kLayers), m(kLayers), a(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    CHECK_CU(cuMemAlloc(&w[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&g[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&m[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&a[l], layer_bytes));
    uint64_t layer_seed = 100 + l;
    Launch(k.init, init, {&w[l], &n, &layer_seed});
    CHECK_CU(cuMemsetD32Async(m[l], 0, n, init));
  }
  if (!blocking) CHECK_CU(cuStreamSynchronize(s));

  // Capture one graph per layer. Arguments are copied at capture time.
  std::vector<CUgraph> graphs(kLayers);
  std::vector<CUgraphExec> execs(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    CUdeviceptr in = l == 0 ? input : a[l - 1];
    CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK_CU(cuMemsetD32Async(g[l], 0, n, s));
    Launch(k.forward, s, {&a[l], &in, &w[l], &n});
    Launch(k.backward, s, {&g[l], &a[l], &w[l], &n});
    Launch(k.sgd, s, {&w[l], &m[l], &g[l], &n});
    if (l == kLayers - 1) CHECK_CU(cuMemcpyDtoDAsync(input, a[l], layer_bytes, s));
    CHECK_CU(cuStreamEndCapture(s, &graphs[l]));
    if (l % 2 == 0) {
      CHECK_CU(cuGraphInstantiate(&execs[l], graphs[l], 0));
    } else {
      CUDA_GRAPH_INSTANTIATE_PARAMS params = {};
      CHECK_CU(cuGraphInstantiateWithParams(&execs[l], graphs[l], &params));
    }
  }
  // Nothing ran during capture: the weights are still the initial ones here.
  uint64_t launches = 0;
  for (int it = 0; it < iterations; ++it) {
    for (int l = 0; l < kLayers; ++l) {
      CHECK_CU(cuGraphLaunch(execs[l], s));
      ++launches;
    }
  }
  CHECK_CU(cuStreamSynchronize(s));
  for (int l = 0; l < kLayers; ++l) {
    CHECK_CU(cuGraphExecDestroy(execs[l]));
    CHECK_CU(cuGraphDestroy(graphs[l]));
  }

  CUdeviceptr sums;
  const int kSums = 2 * kLayers + 1;
  CHECK_CU(cuMemAlloc(&sums, kSums * sizeof(uint64_t)));
  for (int l = 0; l < kLayers; ++l) {
    CUdeviceptr ws = sums + (2 * l) * sizeof(uint64_t);
    CUdeviceptr ms = sums + (2 * l + 1) * sizeof(uint64_t);
    Launch(k.fnv, s, {&ws, &w[l], &layer_bytes});
    Launch(k.fnv, s, {&ms, &m[l], &layer_bytes});
  }
  CUdeviceptr is = sums + (2 * kLayers) * sizeof(uint64_t);
  Launch(k.fnv, s, {&is, &input, &layer_bytes});
  std::vector<uint64_t> host(kSums);
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemcpyDtoH(host.data(), sums, host.size() * sizeof(uint64_t)));
  uint64_t total = 1469598103934665603ull;
  for (uint64_t h : host) total = (total ^ h) * 1099511628211ull;
  std::printf("checksum %016" PRIx64 "\n", total);
  std::printf("layer_bytes %" PRIu64 " footprint_bytes %" PRIu64 " launches %" PRIu64 "\n",
              layer_bytes, layer_bytes * (4 * kLayers + 1), launches);
  return 0;
}

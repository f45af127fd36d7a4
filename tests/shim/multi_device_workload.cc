// The training-like workload of train_workload.cc on every device at once,
// one process: each device trains its own layers on its own stream (kernels,
// memsets and copies), and after each iteration the devices exchange data with
// peer copies (cuMemcpyPeer, cuMemcpyPeerAsync) and a UVA cuMemcpyDtoD between
// two devices' memory. Prints one checksum over every device's final weights
// and momentum.
//
// ORDER says how the devices allocate and initialize their layers before the
// first iteration: "interleaved" (the default: layer by layer, each device in
// turn, so each device's blocks are allocated while the other device's memory
// is already oversubscribed) or "device_by_device" (the last device all its
// layers first, then the one before it, ...: the last device's data fills the
// host tier before the first device allocates). The result is the same.
//
// Usage: multi_device_workload KERNELS.so FOOTPRINT_BYTES_PER_DEVICE [ITERATIONS [ORDER]]
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

struct DeviceState {
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  TrainKernels k;
  CUdeviceptr input = 0;
  std::vector<CUdeviceptr> w, g, m, a;
};

void MakeCurrent(const DeviceState& d) { CHECK_CU(cuCtxSetCurrent(d.ctx)); }

uint64_t Fold(uint64_t total, uint64_t h) { return (total ^ h) * 1099511628211ull; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s KERNELS.so FOOTPRINT_BYTES_PER_DEVICE [ITERATIONS "
                 "[interleaved|device_by_device]]\n",
                 argv[0]);
    return 2;
  }
  const uint64_t footprint = std::strtoull(argv[2], nullptr, 10);
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::string order = argc > 4 ? argv[4] : "interleaved";
  if (order != "interleaved" && order != "device_by_device") {
    std::fprintf(stderr, "unknown order '%s'\n", order.c_str());
    return 2;
  }
  constexpr int kLayers = kTrainLayers;
  uint64_t layer_bytes = TrainLayerBytes(footprint);
  uint64_t n = layer_bytes / sizeof(float);

  const std::vector<CUcontext> contexts = RetainPrimaryContexts(2);
  const int count = static_cast<int>(contexts.size());
  std::vector<DeviceState> devs(count);
  for (int d = 0; d < count; ++d) {
    devs[d].ctx = contexts[d];
    MakeCurrent(devs[d]);
    devs[d].k = LoadTrainKernels(argv[1]);
    CHECK_CU(cuStreamCreate(&devs[d].stream, CU_STREAM_NON_BLOCKING));
  }

  for (int d = 0; d < count; ++d) {
    MakeCurrent(devs[d]);
    CHECK_CU(cuMemAlloc(&devs[d].input, layer_bytes));
    uint64_t seed = 1 + d;
    Launch(devs[d].k.init, devs[d].stream, {&devs[d].input, &n, &seed});
    devs[d].w.resize(kLayers);
    devs[d].g.resize(kLayers);
    devs[d].m.resize(kLayers);
    devs[d].a.resize(kLayers);
  }
  auto allocate_layer = [&](int d, int l) {
    DeviceState& s = devs[d];
    MakeCurrent(s);
    CHECK_CU(cuMemAlloc(&s.w[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&s.g[l], layer_bytes));
    CHECK_CU(cuMemAlloc(&s.m[l], layer_bytes));
    uint64_t layer_seed = 100 * (d + 1) + l;
    Launch(s.k.init, s.stream, {&s.w[l], &n, &layer_seed});
    CHECK_CU(cuMemsetD32Async(s.m[l], 0, n, s.stream));
  };
  if (order == "interleaved") {
    for (int l = 0; l < kLayers; ++l) {
      for (int d = 0; d < count; ++d) allocate_layer(d, l);
    }
  } else {
    for (int d = count - 1; d >= 0; --d) {
      for (int l = 0; l < kLayers; ++l) allocate_layer(d, l);
      MakeCurrent(devs[d]);
      CHECK_CU(cuStreamSynchronize(devs[d].stream));
    }
  }

  for (int it = 0; it < iterations; ++it) {
    for (int l = 0; l < kLayers; ++l) {
      for (int d = 0; d < count; ++d) {
        DeviceState& s = devs[d];
        MakeCurrent(s);
        CHECK_CU(cuMemAlloc(&s.a[l], layer_bytes));
        CUdeviceptr in = l == 0 ? s.input : s.a[l - 1];
        Launch(s.k.forward, s.stream, {&s.a[l], &in, &s.w[l], &n});
      }
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      for (int d = 0; d < count; ++d) {
        DeviceState& s = devs[d];
        MakeCurrent(s);
        Launch(s.k.backward, s.stream, {&s.g[l], &s.a[l], &s.w[l], &n});
        Launch(s.k.sgd, s.stream, {&s.w[l], &s.m[l], &s.g[l], &n});
        CHECK_CU(cuStreamSynchronize(s.stream));
        CHECK_CU(cuMemFree(s.a[l]));
      }
    }
    // Exchange: each device's layer `it % kLayers` momentum goes to the next
    // device (synchronous peer copy, issued on the destination's context),
    // the next device's first weights come back (asynchronous peer copy on
    // the source's stream), and a UVA copy moves a gradient between devices.
    const int l = it % kLayers;
    for (int d = 0; d < count; ++d) {
      DeviceState& src = devs[d];
      DeviceState& dst = devs[(d + 1) % count];
      MakeCurrent(dst);
      CHECK_CU(cuMemcpyPeer(dst.m[l], dst.ctx, src.m[l], src.ctx, layer_bytes));
      MakeCurrent(src);
      CHECK_CU(
          cuMemcpyPeerAsync(src.w[0], src.ctx, dst.w[0], dst.ctx, layer_bytes / 2, src.stream));
      CHECK_CU(cuStreamSynchronize(src.stream));
      CHECK_CU(cuMemcpyDtoD(dst.g[kLayers - 1 - l], src.g[l], layer_bytes));
      CHECK_CU(cuCtxSynchronize());
    }
  }

  uint64_t total = 1469598103934665603ull;
  for (int d = 0; d < count; ++d) {
    DeviceState& s = devs[d];
    MakeCurrent(s);
    CUdeviceptr sums;
    CHECK_CU(cuMemAlloc(&sums, 3 * kLayers * sizeof(uint64_t)));
    for (int l = 0; l < kLayers; ++l) {
      CUdeviceptr ws = sums + (3 * l) * sizeof(uint64_t);
      CUdeviceptr ms = sums + (3 * l + 1) * sizeof(uint64_t);
      CUdeviceptr gs = sums + (3 * l + 2) * sizeof(uint64_t);
      Launch(s.k.fnv, s.stream, {&ws, &s.w[l], &layer_bytes});
      Launch(s.k.fnv, s.stream, {&ms, &s.m[l], &layer_bytes});
      Launch(s.k.fnv, s.stream, {&gs, &s.g[l], &layer_bytes});
    }
    std::vector<uint64_t> host(3 * kLayers);
    CHECK_CU(cuStreamSynchronize(s.stream));
    CHECK_CU(cuMemcpyDtoH(host.data(), sums, host.size() * sizeof(uint64_t)));
    for (uint64_t h : host) total = Fold(total, h);
    size_t free_bytes = 0, total_bytes = 0;
    CHECK_CU(cuMemGetInfo(&free_bytes, &total_bytes));
    std::printf("device %d reported_total %zu\n", d, total_bytes);
  }
  std::printf("checksum %016" PRIx64 "\n", total);
  std::printf("layer_bytes %" PRIu64 " peak_bytes_per_device %" PRIu64 "\n", layer_bytes,
              layer_bytes * (4 * kLayers + 1));
  return 0;
}

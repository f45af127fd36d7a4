// One thread captures a stream in CU_STREAM_CAPTURE_MODE_GLOBAL (as CUDA
// graphs and torch.cuda.graph do by default) while another thread, in the
// default GLOBAL interaction mode too, allocates, launches and frees the
// training-like workload of train_workload.cc. Under the shim at a fraction of
// the footprint the second thread's launches page memory in and out; none of
// the shim's own driver calls may invalidate the capture (Note [relaxed driver
// sequences] in shim/core/relaxed_capture_mode.h). Then the captured graph is
// launched and one checksum over both threads' results is printed.
//
// The worker switches to RELAXED mode around its cuMemAlloc and cuMemFree
// calls only, as a program must under the driver, which refuses them
// ("potentially unsafe") in GLOBAL mode while another thread captures in
// GLOBAL mode; its launches, copies and memsets (and the shim's paging under
// them) run in GLOBAL mode.
//
// Usage: capture_concurrent KERNELS.so FOOTPRINT_BYTES overlap|sequential|unsafe
// overlap: the worker runs while the capture is open; sequential: the worker
// runs first and the capture after it (the same result: the reference).
// Exit: 0 ok, 3 out of memory, 1 other error (also a capture that was
// invalidated). unsafe: the worker calls cuMemAlloc in GLOBAL mode while the
// capture is open and prints "alloc R end E" (the results of that
// cuMemAlloc and of cuStreamEndCapture); exit 0.
#include <cuda.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/shim/cuda_check.h"
#include "tests/shim/train_kernels.h"

namespace {

constexpr int kIterations = 2;
constexpr int kCapturedLaunches = 64;

// The worker: kTrainLayers layers of weights, gradients and momentum, and
// activations allocated and freed every iteration, all on its own stream.
// The calling thread in RELAXED mode while it lives.
class RelaxedScope {
 public:
  RelaxedScope() { CHECK_CU(cuThreadExchangeStreamCaptureMode(&mode_)); }
  ~RelaxedScope() { cuThreadExchangeStreamCaptureMode(&mode_); }

 private:
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

CUresult Alloc(CUdeviceptr* p, uint64_t bytes) {
  RelaxedScope relaxed;
  return cuMemAlloc(p, bytes);
}

CUresult Free(CUdeviceptr p) {
  RelaxedScope relaxed;
  return cuMemFree(p);
}

struct Worker {
  uint64_t layer_bytes = 0;
  std::vector<CUdeviceptr> w, g, m;
  CUdeviceptr input = 0;

  void Run(const TrainKernels& k, CUcontext ctx) {
    CHECK_CU(cuCtxSetCurrent(ctx));
    CUstream s;
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t n = layer_bytes / sizeof(float);
    CHECK_CU(Alloc(&input, layer_bytes));
    uint64_t seed = 1;
    Launch(k.init, s, {&input, &n, &seed});
    w.resize(kTrainLayers);
    g.resize(kTrainLayers);
    m.resize(kTrainLayers);
    for (int l = 0; l < kTrainLayers; ++l) {
      CHECK_CU(Alloc(&w[l], layer_bytes));
      CHECK_CU(Alloc(&g[l], layer_bytes));
      CHECK_CU(Alloc(&m[l], layer_bytes));
      uint64_t layer_seed = 100 + l;
      Launch(k.init, s, {&w[l], &n, &layer_seed});
      CHECK_CU(cuMemsetD32Async(m[l], 0, n, s));
    }
    std::vector<CUdeviceptr> a(kTrainLayers);
    for (int it = 0; it < kIterations; ++it) {
      for (int l = 0; l < kTrainLayers; ++l) {
        CHECK_CU(Alloc(&a[l], layer_bytes));
        CUdeviceptr in = l == 0 ? input : a[l - 1];
        Launch(k.forward, s, {&a[l], &in, &w[l], &n});
      }
      for (int l = kTrainLayers - 1; l >= 0; --l) {
        Launch(k.backward, s, {&g[l], &a[l], &w[l], &n});
        Launch(k.sgd, s, {&w[l], &m[l], &g[l], &n});
      }
      // Freed with work still queued: the shim keeps them until it completed.
      for (int l = 0; l < kTrainLayers; ++l) CHECK_CU(Free(a[l]));
    }
  }
};

// The capturer: kCapturedLaunches SGD steps on its own small buffers,
// captured into one graph, launched once after the capture.
struct Capturer {
  uint64_t bytes = 1 << 20;
  CUdeviceptr x = 0, mx = 0, gx = 0;
  CUstream s = nullptr;
  CUgraph graph = nullptr;

  void Prepare(const TrainKernels& k) {
    CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    uint64_t n = bytes / sizeof(float);
    CHECK_CU(cuMemAlloc(&x, bytes));
    CHECK_CU(cuMemAlloc(&mx, bytes));
    CHECK_CU(cuMemAlloc(&gx, bytes));
    uint64_t seed = 7, gseed = 8;
    Launch(k.init, s, {&x, &n, &seed});
    Launch(k.init, s, {&gx, &n, &gseed});
    CHECK_CU(cuMemsetD32Async(mx, 0, n, s));
    CHECK_CU(cuStreamSynchronize(s));
  }
  void Begin() { CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL)); }
  void CaptureSteps(const TrainKernels& k) {
    uint64_t n = bytes / sizeof(float);
    for (int i = 0; i < kCapturedLaunches; ++i) {
      Launch(k.sgd, s, {&x, &mx, &gx, &n});
      std::this_thread::yield();  // interleave with the worker
    }
  }
  void End() {
    CHECK_CU(cuStreamEndCapture(s, &graph));  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if broken
    CUgraphExec exec;
    CHECK_CU(cuGraphInstantiate(&exec, graph, 0));
    CHECK_CU(cuGraphLaunch(exec, s));
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuGraphExecDestroy(exec));
    CHECK_CU(cuGraphDestroy(graph));
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s KERNELS.so FOOTPRINT_BYTES overlap|sequential\n", argv[0]);
    return 2;
  }
  const uint64_t footprint = std::strtoull(argv[2], nullptr, 10);
  const bool overlap = std::string(argv[3]) == "overlap";
  CUcontext ctx = SetUpPrimaryContext();
  const TrainKernels k = LoadTrainKernels(argv[1]);
  Capturer capturer;
  capturer.Prepare(k);
  if (std::string(argv[3]) == "unsafe") {
    // Documented: a GLOBAL-mode thread may make no potentially unsafe call
    // (cuMemAlloc) while another thread captures in GLOBAL mode; the call
    // fails and the capture is invalidated.
    capturer.Begin();
    capturer.CaptureSteps(k);
    CUresult alloc = CUDA_SUCCESS;
    std::thread other([&] {
      CHECK_CU(cuCtxSetCurrent(ctx));
      CUdeviceptr p = 0;
      alloc = cuMemAlloc(&p, 1 << 20);
    });
    other.join();
    CUgraph graph = nullptr;
    const CUresult end = cuStreamEndCapture(capturer.s, &graph);
    std::printf("alloc %d end %d\n", static_cast<int>(alloc), static_cast<int>(end));
    return 0;
  }
  Worker worker;
  worker.layer_bytes = TrainLayerBytes(footprint);

  if (overlap) {
    std::atomic<bool> capturing{false}, worked{false};
    std::thread capture_thread([&] {
      CHECK_CU(cuCtxSetCurrent(ctx));
      capturer.Begin();
      capturing = true;
      capturer.CaptureSteps(k);
      while (!worked) std::this_thread::yield();
      capturer.End();
    });
    while (!capturing) std::this_thread::yield();
    std::thread work_thread([&] {
      worker.Run(k, ctx);
      worked = true;
    });
    work_thread.join();
    capture_thread.join();
  } else {
    worker.Run(k, ctx);
    capturer.Begin();
    capturer.CaptureSteps(k);
    capturer.End();
  }
  CHECK_CU(cuCtxSynchronize());

  std::vector<CUdeviceptr> blocks = {capturer.x, capturer.mx, worker.input};
  std::vector<uint64_t> sizes = {capturer.bytes, capturer.bytes, worker.layer_bytes};
  for (int l = 0; l < kTrainLayers; ++l) {
    blocks.push_back(worker.w[l]);
    blocks.push_back(worker.m[l]);
    sizes.push_back(worker.layer_bytes);
    sizes.push_back(worker.layer_bytes);
  }
  CUdeviceptr sums;
  CHECK_CU(cuMemAlloc(&sums, blocks.size() * sizeof(uint64_t)));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (size_t i = 0; i < blocks.size(); ++i) {
    CUdeviceptr out = sums + i * sizeof(uint64_t);
    Launch(k.fnv, s, {&out, &blocks[i], &sizes[i]});
  }
  std::vector<uint64_t> host(blocks.size());
  CHECK_CU(cuStreamSynchronize(s));
  CHECK_CU(cuMemcpyDtoH(host.data(), sums, host.size() * sizeof(uint64_t)));
  uint64_t total = 1469598103934665603ull;
  for (uint64_t h : host) total = (total ^ h) * 1099511628211ull;
  std::printf("checksum %016" PRIx64 "\n", total);
  std::printf("footprint_bytes %" PRIu64 "\n", worker.layer_bytes * (4 * kTrainLayers + 1));
  return 0;
}

// memvirt-sample-train: a small training-like workload written only against the CUDA driver API
// (cuda.h). It initializes the weights of L layers, then per iteration uploads a batch on a copy
// stream, runs forward kernels through the layers and update kernels back, and finally prints a
// checksum of all weights and the elapsed time.
//
//   memvirt-sample-train [--footprint-mb N] [--iterations N] [--layers N] [--kernels PATH]
//                        [--verify]
//
// The device footprint is split evenly into the input batch plus weights and activations of each
// layer. --verify recomputes everything on the host and fails (exit 1) on any difference.
// Kernels come from a module (on the simulated GPU: a shared object, default
// <dir of the executable>/../lib/memvirt-sample-kernels.so).
#include <cuda.h>
#include <limits.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sample_math.h"

namespace {

#define CHECK_CU(expr)                                                               \
  do {                                                                               \
    CUresult check_cu_result = (expr);                                               \
    if (check_cu_result != CUDA_SUCCESS) {                                           \
      const char* check_cu_name = "?";                                               \
      cuGetErrorName(check_cu_result, &check_cu_name);                               \
      std::fprintf(stderr, "memvirt-sample-train: %s failed: %s (line %d)\n", #expr, \
                   check_cu_name, __LINE__);                                         \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

struct Options {
  uint64_t footprint_mb = 256;
  int iterations = 5;
  int layers = 8;
  std::string kernels;
  bool verify = false;
};

std::string DefaultKernelPath() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "memvirt-sample-kernels.so";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  return dir + "/../lib/memvirt-sample-kernels.so";
}

void Usage() {
  std::fprintf(stderr,
               "usage: memvirt-sample-train [--footprint-mb N] [--iterations N] [--layers N]\n"
               "                            [--kernels PATH] [--verify]\n");
}

bool Parse(int argc, char** argv, Options* o) {
  o->kernels = DefaultKernelPath();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](long long min) -> long long {
      if (i + 1 >= argc) return -1;
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      return (*end == '\0' && v >= min) ? v : -1;
    };
    long long v;
    if (a == "--footprint-mb" && (v = value(1)) > 0) {
      o->footprint_mb = static_cast<uint64_t>(v);
    } else if (a == "--iterations" && (v = value(1)) > 0) {
      o->iterations = static_cast<int>(v);
    } else if (a == "--layers" && (v = value(1)) > 0) {
      o->layers = static_cast<int>(v);
    } else if (a == "--kernels" && i + 1 < argc) {
      o->kernels = argv[++i];
    } else if (a == "--verify") {
      o->verify = true;
    } else {
      return false;
    }
  }
  return true;
}

template <typename... Args>
void Launch(CUfunction f, CUstream s, Args... args) {
  void* params[] = {static_cast<void*>(&args)...};
  CHECK_CU(cuLaunchKernel(f, 256, 1, 1, 256, 1, 1, 0, s, params, nullptr));
}

// Host replica of the device computation (for --verify).
uint64_t HostChecksum(const Options& o, uint64_t n) {
  const auto layers = static_cast<size_t>(o.layers);
  std::vector<std::vector<uint32_t>> w(layers, std::vector<uint32_t>(n));
  std::vector<std::vector<uint32_t>> act(layers, std::vector<uint32_t>(n));
  std::vector<uint32_t> input(n);
  for (size_t l = 0; l < layers; ++l) {
    for (uint64_t i = 0; i < n; ++i) w[l][i] = memvirt_sample::InitWeight(l + 1, i);
  }
  for (int it = 0; it < o.iterations; ++it) {
    for (uint64_t i = 0; i < n; ++i) input[i] = memvirt_sample::Input(it, i);
    const std::vector<uint32_t>* in = &input;
    for (size_t l = 0; l < layers; ++l) {
      for (uint64_t i = 0; i < n; ++i) act[l][i] = memvirt_sample::Forward((*in)[i], w[l][i]);
      in = &act[l];
    }
    for (size_t l = layers; l-- > 0;) {
      const uint32_t step = static_cast<uint32_t>(it * o.layers) + static_cast<uint32_t>(l);
      for (uint64_t i = 0; i < n; ++i) w[l][i] = memvirt_sample::Update(w[l][i], act[l][i], step);
    }
  }
  uint64_t h = memvirt_sample::kFoldSeed;
  for (size_t l = 0; l < layers; ++l) h = memvirt_sample::Fold(h, w[l].data(), n);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, &o)) {
    Usage();
    return 2;
  }
  const auto wall0 = std::chrono::steady_clock::now();
  const auto layers = static_cast<size_t>(o.layers);
  const uint64_t buffers = 2 * layers + 1;
  const uint64_t n = (o.footprint_mb << 20) / buffers / sizeof(uint32_t);  // words per buffer
  if (n == 0) {
    std::fprintf(stderr, "memvirt-sample-train: footprint too small for %d layers\n", o.layers);
    return 2;
  }
  const size_t bytes = n * sizeof(uint32_t);

  CHECK_CU(cuInit(0));
  CUdevice dev;
  CHECK_CU(cuDeviceGet(&dev, 0));
  char name[128] = {};
  CHECK_CU(cuDeviceGetName(name, sizeof(name), dev));
  CUcontext ctx;
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUmodule module;
  CHECK_CU(cuModuleLoad(&module, o.kernels.c_str()));
  CUfunction k_init, k_forward, k_update, k_checksum;
  CHECK_CU(cuModuleGetFunction(&k_init, module, "sample_init"));
  CHECK_CU(cuModuleGetFunction(&k_forward, module, "sample_forward"));
  CHECK_CU(cuModuleGetFunction(&k_update, module, "sample_update"));
  CHECK_CU(cuModuleGetFunction(&k_checksum, module, "sample_checksum"));

  CUstream compute, copy;
  CHECK_CU(cuStreamCreate(&compute, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&copy, CU_STREAM_NON_BLOCKING));
  CUevent uploaded, consumed, start, stop;
  CHECK_CU(cuEventCreate(&uploaded, CU_EVENT_DISABLE_TIMING));
  CHECK_CU(cuEventCreate(&consumed, CU_EVENT_DISABLE_TIMING));
  CHECK_CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CHECK_CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));

  CUdeviceptr input;
  CHECK_CU(cuMemAlloc(&input, bytes));
  std::vector<CUdeviceptr> w(layers), act(layers);
  for (size_t l = 0; l < layers; ++l) {
    CHECK_CU(cuMemAlloc(&w[l], bytes));
    CHECK_CU(cuMemAlloc(&act[l], bytes));
  }
  uint32_t* staging = nullptr;
  CHECK_CU(cuMemAllocHost(reinterpret_cast<void**>(&staging), bytes));

  CHECK_CU(cuEventRecord(start, compute));
  for (size_t l = 0; l < layers; ++l)
    Launch(k_init, compute, w[l], n, static_cast<uint32_t>(l + 1));
  for (int it = 0; it < o.iterations; ++it) {
    CHECK_CU(cuStreamSynchronize(copy));  // the staging buffer is free again
    for (uint64_t i = 0; i < n; ++i) staging[i] = memvirt_sample::Input(it, i);
    CHECK_CU(cuStreamWaitEvent(copy, consumed, 0));  // previous batch fully used
    CHECK_CU(cuMemcpyHtoDAsync(input, staging, bytes, copy));
    CHECK_CU(cuEventRecord(uploaded, copy));
    CHECK_CU(cuStreamWaitEvent(compute, uploaded, 0));
    CUdeviceptr in = input;
    for (size_t l = 0; l < layers; ++l) {
      Launch(k_forward, compute, in, w[l], act[l], n);
      in = act[l];
    }
    for (size_t l = layers; l-- > 0;) {
      const uint32_t step = static_cast<uint32_t>(it * o.layers) + static_cast<uint32_t>(l);
      Launch(k_update, compute, w[l], act[l], n, step);
    }
    CHECK_CU(cuEventRecord(consumed, compute));
  }
  CUdeviceptr sum;
  CHECK_CU(cuMemAlloc(&sum, sizeof(uint64_t)));
  const uint64_t seed = memvirt_sample::kFoldSeed;
  CHECK_CU(cuMemcpyHtoDAsync(sum, &seed, sizeof(seed), compute));
  for (size_t l = 0; l < layers; ++l) Launch(k_checksum, compute, w[l], n, sum);
  CHECK_CU(cuEventRecord(stop, compute));
  uint64_t checksum = 0;
  CHECK_CU(cuMemcpyDtoHAsync(&checksum, sum, sizeof(checksum), compute));
  CHECK_CU(cuStreamSynchronize(compute));
  float gpu_ms = 0;
  CHECK_CU(cuEventElapsedTime(&gpu_ms, start, stop));
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall0).count();

  std::printf("device: %s\n", name);
  std::printf("footprint: %" PRIu64 " MiB (%zu layers, %zu buffers of %zu bytes)\n", o.footprint_mb,
              layers, static_cast<size_t>(buffers), bytes);
  std::printf("iterations: %d\n", o.iterations);
  std::printf("checksum: %016" PRIx64 "\n", checksum);
  std::printf("time: %.1f ms (device %.1f ms)\n", wall_ms, gpu_ms);
  int rc = 0;
  if (o.verify) {
    const uint64_t expected = HostChecksum(o, n);
    std::printf("verify: %s (host %016" PRIx64 ")\n", expected == checksum ? "ok" : "MISMATCH",
                expected);
    rc = expected == checksum ? 0 : 1;
  }

  CHECK_CU(cuMemFree(sum));
  CHECK_CU(cuMemFreeHost(staging));
  for (size_t l = 0; l < layers; ++l) {
    CHECK_CU(cuMemFree(w[l]));
    CHECK_CU(cuMemFree(act[l]));
  }
  CHECK_CU(cuMemFree(input));
  for (CUevent e : {uploaded, consumed, start, stop}) CHECK_CU(cuEventDestroy(e));
  CHECK_CU(cuStreamDestroy(compute));
  CHECK_CU(cuStreamDestroy(copy));
  CHECK_CU(cuModuleUnload(module));
  CHECK_CU(cuDevicePrimaryCtxRelease(dev));
  return rc;
}

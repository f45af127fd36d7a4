// Oversubscribed training-like workload with real CUDA kernels (cudart, so
// the driver is reached through cuGetProcAddress exactly like PyTorch does).
// Run it once without the shim and once under LD_PRELOAD=libmemshim.so with
// MEMSHIM_DEVICE_BUDGET below its footprint: the checksums must match.
//
// Usage: oversub_workload FOOTPRINT_BYTES [ITERATIONS [graph]]
// With "graph" the activations are allocated once and each iteration is one
// CUDA graph launch (captured from the stream): the same kernels in the same
// order, so the checksum equals the eager run's.
// Prints "checksum <hex>", "footprint <bytes>", "seconds <s>", "total <bytes>".
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(call)                                                                              \
  do {                                                                                           \
    cudaError_t e = (call);                                                                      \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(e == cudaErrorMemoryAllocation ? 3 : 1);                                         \
    }                                                                                            \
  } while (0)

__device__ unsigned long long Mix(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__global__ void InitUniform(float* x, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    x[i] = static_cast<float>(Mix(seed * 0x9e3779b97f4a7c15ull + i) >> 40) / 8388608.0f - 1.0f;
  }
}

__global__ void Forward(float* out, const float* in, const float* w, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = tanhf(in[i] * w[i] + 0.1f * in[i]);
  }
}

__global__ void Backward(float* g, const float* a, const float* w, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    g[i] = a[i] * (1.0f - a[i] * a[i]) * 0.5f + 0.01f * w[i];
  }
}

__global__ void SgdMomentum(float* w, float* m, const float* g, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    m[i] = 0.9f * m[i] + g[i];
    w[i] -= 0.05f * m[i];
  }
}

// Order-independent checksum: sum of per-element hashes (exact in integers).
__global__ void HashSum(unsigned long long* out, const unsigned int* x, size_t n) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    local += Mix(x[i] ^ (static_cast<unsigned long long>(i) << 32));
  }
  atomicAdd(out, local);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const size_t footprint = std::strtoull(argv[1], nullptr, 10);
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 3;
  const bool use_graph = argc > 3 && std::string(argv[3]) == "graph";
  constexpr int kLayers = 12;
  const size_t layer_bytes = footprint / (4 * kLayers) / 4096 * 4096;
  const size_t n = layer_bytes / sizeof(float);
  const dim3 grid(1024), block(256);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* input;
  CHECK(cudaMalloc(&input, layer_bytes));
  InitUniform<<<grid, block, 0, s>>>(input, n, 1);
  std::vector<float*> w(kLayers), g(kLayers), m(kLayers), a(kLayers);
  for (int l = 0; l < kLayers; ++l) {
    CHECK(cudaMalloc(&w[l], layer_bytes));
    CHECK(cudaMalloc(&g[l], layer_bytes));
    CHECK(cudaMalloc(&m[l], layer_bytes));
    InitUniform<<<grid, block, 0, s>>>(w[l], n, 100 + l);
    CHECK(cudaMemsetAsync(m[l], 0, layer_bytes, s));
  }
  CHECK(cudaStreamSynchronize(s));
  auto t0 = std::chrono::steady_clock::now();
  if (use_graph) {
    for (int l = 0; l < kLayers; ++l) CHECK(cudaMalloc(&a[l], layer_bytes));
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < kLayers; ++l) {
      Forward<<<grid, block, 0, s>>>(a[l], l == 0 ? input : a[l - 1], w[l], n);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      Backward<<<grid, block, 0, s>>>(g[l], a[l], w[l], n);
      SgdMomentum<<<grid, block, 0, s>>>(w[l], m[l], g[l], n);
    }
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int it = 0; it < iterations; ++it) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    for (int l = 0; l < kLayers; ++l) CHECK(cudaFree(a[l]));
  }
  for (int it = 0; it < (use_graph ? 0 : iterations); ++it) {
    for (int l = 0; l < kLayers; ++l) {
      CHECK(cudaMalloc(&a[l], layer_bytes));
      Forward<<<grid, block, 0, s>>>(a[l], l == 0 ? input : a[l - 1], w[l], n);
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      Backward<<<grid, block, 0, s>>>(g[l], a[l], w[l], n);
      SgdMomentum<<<grid, block, 0, s>>>(w[l], m[l], g[l], n);
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaFree(a[l]));
    }
  }
  CHECK(cudaStreamSynchronize(s));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unsigned long long* sums;
  CHECK(cudaMalloc(&sums, 2 * kLayers * sizeof(unsigned long long)));
  CHECK(cudaMemsetAsync(sums, 0, 2 * kLayers * sizeof(unsigned long long), s));
  for (int l = 0; l < kLayers; ++l) {
    HashSum<<<grid, block, 0, s>>>(sums + 2 * l, reinterpret_cast<unsigned int*>(w[l]), n);
    HashSum<<<grid, block, 0, s>>>(sums + 2 * l + 1, reinterpret_cast<unsigned int*>(m[l]), n);
  }
  std::vector<unsigned long long> host(2 * kLayers);
  CHECK(
      cudaMemcpyAsync(host.data(), sums, host.size() * sizeof(host[0]), cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError());
  unsigned long long total = 1469598103934665603ull;
  for (unsigned long long h : host) total = (total ^ h) * 1099511628211ull;
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("checksum %016llx\n", total);
  std::printf("footprint %zu\n", layer_bytes * (4 * kLayers + 1));
  std::printf("seconds %.3f\n", seconds);
  std::printf("total %zu\n", total_bytes);
  return 0;
}

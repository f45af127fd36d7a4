// A CUDA runtime program written from the CUDA Runtime API documentation alone: it exercises
// what unmodified applications use (memory, copies, streams, events, pools, pinned memory,
// several devices, driver entry points, symbols, occupancy, graphs captured from a stream,
// kernels) and checks every result against a host computation. Built with nvcc against the
// toolkit's libcudart (shared and static, with and without --default-stream per-thread and
// compressed fatbins) and run on the simulated driver, where its kernels run the host
// implementations in cudart_check_kernels.cc (MEMSIM_KERNELS).
//
// Usage: cudart_api_check [DEVICE_COUNT DEVICE_MEMORY_BYTES]   (the values the sim was given;
// a memory size of 0 skips the checks of the reported capacity, e.g. under libmemshim.so, which
// reports its virtual capacity)
// Prints one line per check and "N passed, M failed"; exits 1 if any check failed.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int g_passed = 0;
int g_failed = 0;

void Report(bool ok, const char* what, const char* detail) {
  std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail[0] ? ": " : "", detail);
  ok ? ++g_passed : ++g_failed;
}

#define EXPECT(cond, what)                                   \
  do {                                                       \
    Report(static_cast<bool>(cond), what, #cond);            \
  } while (0)
#define EXPECT_CUDA(call, what)                              \
  do {                                                       \
    cudaError_t e_ = (call);                                 \
    Report(e_ == cudaSuccess, what, cudaGetErrorString(e_)); \
  } while (0)

uint64_t Checksum(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

__device__ int g_counter = 41;
__device__ float g_table[4] = {1.0f, 2.0f, 3.0f, 4.0f};

// Host implementations: tests/cuda/cudart_check_kernels.cc (same mangled names).
__global__ void ScaleAdd(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void FillPattern(unsigned* out, unsigned seed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (static_cast<unsigned>(i) * 2654435761u) ^ seed;
}

static void CheckDevices(int expected_count, size_t expected_memory) {
  int count = 0;
  EXPECT_CUDA(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  EXPECT(count == expected_count, "device count matches MEMSIM_DEVICE_COUNT");
  cudaDeviceProp prop;
  EXPECT_CUDA(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  if (expected_memory != 0) {
    EXPECT(prop.totalGlobalMem == expected_memory, "totalGlobalMem matches MEMSIM_DEVICE_MEMORY");
  }
  EXPECT(prop.major == 9 && prop.minor == 0, "compute capability 9.0");
  EXPECT(prop.multiProcessorCount > 0 && prop.warpSize == 32, "SM count and warp size");
  size_t free_bytes = 0, total_bytes = 0;
  EXPECT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  EXPECT((expected_memory == 0 || total_bytes == expected_memory) && free_bytes <= total_bytes,
         "cudaMemGetInfo totals");
  void* p = nullptr;
  EXPECT_CUDA(cudaMalloc(&p, 64 << 20), "cudaMalloc 64 MiB");
  size_t free_after = 0;
  EXPECT_CUDA(cudaMemGetInfo(&free_after, &total_bytes), "cudaMemGetInfo after cudaMalloc");
  EXPECT(free_after + (64 << 20) <= free_bytes, "free memory drops by the allocation");
  EXPECT_CUDA(cudaFree(p), "cudaFree");
}

static void CheckCopies() {
  const size_t n = 1 << 20;
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned char>(i * 131 + 7);
  unsigned char *a = nullptr, *b = nullptr;
  EXPECT_CUDA(cudaMalloc(&a, n), "cudaMalloc a");
  EXPECT_CUDA(cudaMalloc(&b, n), "cudaMalloc b");
  EXPECT_CUDA(cudaMemcpy(a, host.data(), n, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  EXPECT_CUDA(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
  EXPECT_CUDA(cudaMemcpy(back.data(), b, n, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  EXPECT(Checksum(back.data(), n) == Checksum(host.data(), n), "H2D/D2D/D2H round trip");
  // 2D: a 100x64 window of a pitched allocation.
  size_t pitch = 0;
  unsigned char* pitched = nullptr;
  EXPECT_CUDA(cudaMallocPitch(reinterpret_cast<void**>(&pitched), &pitch, 100, 64),
              "cudaMallocPitch");
  EXPECT_CUDA(cudaMemcpy2D(pitched, pitch, host.data(), 100, 100, 64, cudaMemcpyHostToDevice),
              "cudaMemcpy2D H2D");
  std::vector<unsigned char> window(100 * 64);
  EXPECT_CUDA(cudaMemcpy2D(window.data(), 100, pitched, pitch, 100, 64, cudaMemcpyDeviceToHost),
              "cudaMemcpy2D D2H");
  EXPECT(std::memcmp(window.data(), host.data(), window.size()) == 0, "cudaMemcpy2D window");
  EXPECT_CUDA(cudaMemset(a, 0x5a, n), "cudaMemset");
  cudaStream_t s;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  EXPECT_CUDA(cudaMemsetAsync(a + n / 2, 0x11, n / 2, s), "cudaMemsetAsync");
  EXPECT_CUDA(cudaMemcpyAsync(back.data(), a, n, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  EXPECT_CUDA(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  EXPECT(back[0] == 0x5a && back[n / 2 - 1] == 0x5a && back[n / 2] == 0x11 && back[n - 1] == 0x11,
         "memset then async memset, stream-ordered");
  EXPECT_CUDA(cudaStreamDestroy(s), "cudaStreamDestroy");
  cudaFree(pitched);
  cudaFree(a);
  cudaFree(b);
}

static void CheckStreamsAndEvents() {
  const int n = 1 << 16;
  std::vector<float> x(n), y(n), expect(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 97);
    y[i] = static_cast<float>(i % 13);
    expect[i] = 2.0f * x[i] + y[i];
  }
  float *dx = nullptr, *dy = nullptr;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaStream_t copy, compute;
  cudaStreamCreate(&copy);
  cudaStreamCreate(&compute);
  cudaEvent_t copied, start, stop;
  cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, copy);
  cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, copy);
  EXPECT_CUDA(cudaEventRecord(copied, copy), "cudaEventRecord");
  EXPECT_CUDA(cudaStreamWaitEvent(compute, copied, 0), "cudaStreamWaitEvent");
  cudaEventRecord(start, compute);
  ScaleAdd<<<(n + 255) / 256, 256, 0, compute>>>(dy, dx, 2.0f, n);
  EXPECT_CUDA(cudaGetLastError(), "kernel launch <<<>>>");
  cudaEventRecord(stop, compute);
  EXPECT_CUDA(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = -1.0f;
  EXPECT_CUDA(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  EXPECT(ms >= 0.0f, "elapsed time is non-negative");
  EXPECT(cudaEventQuery(stop) == cudaSuccess, "cudaEventQuery after synchronize");
  cudaMemcpy(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT(std::memcmp(out.data(), expect.data(), n * sizeof(float)) == 0,
         "kernel result equals the host computation");
  // The per-thread default stream.
  FillPattern<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(reinterpret_cast<unsigned*>(dx),
                                                                 0xabcdu, n);
  std::vector<unsigned> pattern(n);
  EXPECT_CUDA(cudaMemcpyAsync(pattern.data(), dx, n * sizeof(unsigned), cudaMemcpyDeviceToHost,
                              cudaStreamPerThread),
              "copy on cudaStreamPerThread");
  cudaStreamSynchronize(cudaStreamPerThread);
  bool pattern_ok = true;
  for (int i = 0; i < n; ++i) pattern_ok &= pattern[i] == ((i * 2654435761u) ^ 0xabcdu);
  EXPECT(pattern_ok, "kernel on the per-thread default stream");
  cudaEventDestroy(copied);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(copy);
  cudaStreamDestroy(compute);
  cudaFree(dx);
  cudaFree(dy);
}

static void CheckPools() {
  cudaStream_t s;
  cudaStreamCreate(&s);
  void* p = nullptr;
  EXPECT_CUDA(cudaMallocAsync(&p, 4 << 20, s), "cudaMallocAsync");
  EXPECT_CUDA(cudaMemsetAsync(p, 7, 4 << 20, s), "memset of pool memory");
  EXPECT_CUDA(cudaFreeAsync(p, s), "cudaFreeAsync");
  cudaMemPool_t def = nullptr;
  EXPECT_CUDA(cudaDeviceGetDefaultMemPool(&def, 0), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = 1 << 20;
  EXPECT_CUDA(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &threshold),
              "cudaMemPoolSetAttribute");
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  EXPECT_CUDA(cudaMemPoolCreate(&pool, &props), "cudaMemPoolCreate");
  void* q = nullptr;
  EXPECT_CUDA(cudaMallocFromPoolAsync(&q, 1 << 20, pool, s), "cudaMallocFromPoolAsync");
  std::vector<unsigned char> host(1 << 20, 3), back(1 << 20);
  cudaMemcpyAsync(q, host.data(), host.size(), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(back.data(), q, back.size(), cudaMemcpyDeviceToHost, s);
  cudaFreeAsync(q, s);
  EXPECT_CUDA(cudaStreamSynchronize(s), "pool work completes");
  EXPECT(back == host, "pool memory round trip");
  EXPECT_CUDA(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
  cudaStreamDestroy(s);
}

static void CheckPinned() {
  const size_t n = 1 << 20;
  unsigned char* pinned = nullptr;
  EXPECT_CUDA(cudaMallocHost(reinterpret_cast<void**>(&pinned), n), "cudaMallocHost");
  std::vector<unsigned char> registered(n);
  EXPECT_CUDA(cudaHostRegister(registered.data(), n, cudaHostRegisterDefault), "cudaHostRegister");
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<unsigned char>(i ^ 0x3c);
  void* d = nullptr;
  cudaMalloc(&d, n);
  cudaMemcpyAsync(d, pinned, n, cudaMemcpyHostToDevice, 0);
  cudaMemcpyAsync(registered.data(), d, n, cudaMemcpyDeviceToHost, 0);
  EXPECT_CUDA(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  EXPECT(std::memcmp(pinned, registered.data(), n) == 0, "pinned to registered through device");
  cudaPointerAttributes attr;
  EXPECT_CUDA(cudaPointerGetAttributes(&attr, pinned), "cudaPointerGetAttributes (pinned)");
  EXPECT(attr.type == cudaMemoryTypeHost, "pinned memory reports host type");
  EXPECT_CUDA(cudaHostUnregister(registered.data()), "cudaHostUnregister");
  EXPECT_CUDA(cudaFreeHost(pinned), "cudaFreeHost");
  cudaFree(d);
}

static void CheckSecondDevice(int count) {
  if (count < 2) return;
  EXPECT_CUDA(cudaSetDevice(1), "cudaSetDevice(1)");
  int current = -1;
  cudaGetDevice(&current);
  EXPECT(current == 1, "cudaGetDevice after cudaSetDevice");
  void* on1 = nullptr;
  EXPECT_CUDA(cudaMalloc(&on1, 1 << 20), "cudaMalloc on device 1");
  cudaPointerAttributes attr;
  EXPECT_CUDA(cudaPointerGetAttributes(&attr, on1), "cudaPointerGetAttributes (device 1)");
  EXPECT(attr.type == cudaMemoryTypeDevice && attr.device == 1, "allocation belongs to device 1");
  cudaSetDevice(0);
  void* on0 = nullptr;
  cudaMalloc(&on0, 1 << 20);
  std::vector<unsigned char> host(1 << 20), back(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7);
  cudaMemcpy(on0, host.data(), host.size(), cudaMemcpyHostToDevice);
  EXPECT_CUDA(cudaMemcpyPeer(on1, 1, on0, 0, host.size()), "cudaMemcpyPeer");
  cudaSetDevice(1);
  cudaMemcpy(back.data(), on1, back.size(), cudaMemcpyDeviceToHost);
  EXPECT(back == host, "peer copy round trip");
  cudaFree(on1);
  cudaSetDevice(0);
  cudaFree(on0);
}

static void CheckDriverEntryPoints() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  EXPECT_CUDA(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, cudaEnableDefault,
                                               &status),
              "cudaGetDriverEntryPointByVersion(cuMemAlloc, 12000)");
  EXPECT(fn != nullptr && status == cudaDriverEntryPointSuccess, "entry point found");
  CUdeviceptr dptr = 0;
  if (fn != nullptr) {
    auto mem_alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn);
    EXPECT(mem_alloc(&dptr, 1 << 20) == CUDA_SUCCESS && dptr != 0, "call through the pointer");
    cudaFree(reinterpret_cast<void*>(dptr));
  }
  fn = nullptr;
  EXPECT(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault,
                                          &status) != cudaSuccess ||
             status == cudaDriverEntryPointSymbolNotFound,
         "unknown entry point is not found");
  EXPECT_CUDA(cudaGetDriverEntryPoint("cuMemGetInfo", &fn, cudaEnableDefault, &status),
              "cudaGetDriverEntryPoint(cuMemGetInfo)");
}

static void CheckFunctionsAndSymbols() {
  cudaFuncAttributes attr;
  EXPECT_CUDA(cudaFuncGetAttributes(&attr, ScaleAdd), "cudaFuncGetAttributes");
  EXPECT(attr.maxThreadsPerBlock >= 256, "maxThreadsPerBlock");
  int blocks = 0;
  EXPECT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, ScaleAdd, 256, 0),
              "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  EXPECT(blocks > 0 && blocks * 256 <= 2048, "occupancy within the SM's thread limit");
  int min_grid = 0, block = 0;
  EXPECT_CUDA(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, ScaleAdd),
              "cudaOccupancyMaxPotentialBlockSize");
  EXPECT(block > 0 && block <= 1024 && min_grid > 0, "potential block size");
  int counter = 0;
  EXPECT_CUDA(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(int)), "cudaMemcpyFromSymbol");
  EXPECT(counter == 41, "__device__ variable initialized from the image");
  float table[4] = {0, 0, 0, 0};
  cudaMemcpyFromSymbol(table, g_table, sizeof(table));
  EXPECT(table[0] == 1.0f && table[3] == 4.0f, "__device__ array initialized from the image");
  const int updated = 1234;
  EXPECT_CUDA(cudaMemcpyToSymbol(g_counter, &updated, sizeof(int)), "cudaMemcpyToSymbol");
  cudaMemcpyFromSymbol(&counter, g_counter, sizeof(int));
  EXPECT(counter == 1234, "symbol round trip");
  void* address = nullptr;
  EXPECT_CUDA(cudaGetSymbolAddress(&address, g_counter), "cudaGetSymbolAddress");
  int via_address = 0;
  cudaMemcpy(&via_address, address, sizeof(int), cudaMemcpyDeviceToHost);
  EXPECT(via_address == 1234, "symbol address points at the variable");
}

static void CheckGraphs() {
  const int n = 4096;
  std::vector<float> x(n), y(n), out(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 31);
    y[i] = 1.0f;
  }
  float *dx = nullptr, *dy = nullptr;
  cudaMalloc(&dx, n * sizeof(float));
  cudaMalloc(&dy, n * sizeof(float));
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaGraph_t graph = nullptr;
  EXPECT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  cudaMemcpyAsync(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
  ScaleAdd<<<(n + 255) / 256, 256, 0, s>>>(dy, dx, 3.0f, n);
  ScaleAdd<<<(n + 255) / 256, 256, 0, s>>>(dy, dx, 1.0f, n);
  EXPECT_CUDA(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  EXPECT_CUDA(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int round = 0; round < 2; ++round) {
    EXPECT_CUDA(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
    cudaMemcpyAsync(out.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    bool ok = true;
    for (int i = 0; i < n; ++i) ok &= out[i] == 1.0f + 4.0f * x[i];
    EXPECT(ok, "graph replay computes the captured work");
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  cudaFree(dx);
  cudaFree(dy);
}

static void CheckReset() {
  void* p = nullptr;
  cudaMalloc(&p, 1 << 20);
  EXPECT_CUDA(cudaDeviceReset(), "cudaDeviceReset");
  void* q = nullptr;
  EXPECT_CUDA(cudaMalloc(&q, 1 << 20), "cudaMalloc after cudaDeviceReset");
  EXPECT_CUDA(cudaMemset(q, 1, 1 << 20), "memset after cudaDeviceReset");
  int counter = 0;
  EXPECT_CUDA(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(int)), "symbol after reset");
  EXPECT(counter == 41, "a reset context gets fresh __device__ variables");
  cudaFree(q);
}

int main(int argc, char** argv) {
  const int devices = argc > 1 ? std::atoi(argv[1]) : 1;
  const size_t memory = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : (1ull << 30);
  CheckDevices(devices, memory);
  CheckCopies();
  CheckStreamsAndEvents();
  CheckPools();
  CheckPinned();
  CheckSecondDevice(devices);
  CheckDriverEntryPoints();
  CheckFunctionsAndSymbols();
  CheckGraphs();
  CheckReset();
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}

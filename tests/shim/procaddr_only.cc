// Reaches the driver only through dlsym on libcuda.so.1 and cuGetProcAddress
// (as cudart and PyTorch do); never links libcuda. Oversubscribes the device
// and checks every block with a device-side checksum against the host's.
//
// Usage: procaddr_only KERNELS.so DEVICE_BYTES
// Prints "intercepted yes|no" and "blocks N mismatches M".
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

PFN_cuGetProcAddress_v12000 g_get_proc = nullptr;

template <typename T>
T Get(const char* name) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  CHECK_CU(g_get_proc(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
  if (fn == nullptr) {
    std::fprintf(stderr, "no entry point %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<T>(fn);
}

bool FromShim(void* fn) {
  Dl_info info;
  return dladdr(fn, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libmemshim") != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const uint64_t device_bytes = std::strtoull(argv[2], nullptr, 10);
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  g_get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (g_get_proc == nullptr) return 1;
  auto init = Get<PFN_cuInit_v2000>("cuInit");
  auto device_get = Get<PFN_cuDeviceGet_v2000>("cuDeviceGet");
  auto retain = Get<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain");
  auto set_current = Get<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent");
  auto module_load = Get<PFN_cuModuleLoad_v2000>("cuModuleLoad");
  auto get_function = Get<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction");
  auto mem_alloc = Get<PFN_cuMemAlloc_v3020>("cuMemAlloc");
  auto mem_free = Get<PFN_cuMemFree_v3020>("cuMemFree");
  auto htod = Get<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD");
  auto dtoh = Get<PFN_cuMemcpyDtoH_v3020>("cuMemcpyDtoH");
  auto launch = Get<PFN_cuLaunchKernel_v4000>("cuLaunchKernel");
  auto get_info = Get<PFN_cuMemGetInfo_v3020>("cuMemGetInfo");
  auto sync = Get<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize");
  // The dlsym path must agree with the cuGetProcAddress path.
  void* alloc_by_dlsym = dlsym(lib, "cuMemAlloc_v2");
  const bool intercepted = FromShim(reinterpret_cast<void*>(mem_alloc)) &&
                           FromShim(reinterpret_cast<void*>(launch)) &&
                           alloc_by_dlsym == reinterpret_cast<void*>(mem_alloc);
  std::printf("intercepted %s\n", intercepted ? "yes" : "no");

  CHECK_CU(init(0));
  CUdevice dev;
  CHECK_CU(device_get(&dev, 0));
  CUcontext ctx;
  CHECK_CU(retain(&ctx, dev));
  CHECK_CU(set_current(ctx));
  CUmodule mod;
  CHECK_CU(module_load(&mod, argv[1]));
  CUfunction fnv;
  CHECK_CU(get_function(&fnv, mod, "fnv_bytes"));

  constexpr uint64_t kBlock = 8ull << 20;
  const int blocks = static_cast<int>(3 * device_bytes / kBlock);
  std::vector<CUdeviceptr> ptrs(blocks);
  std::vector<uint64_t> expected(blocks);
  std::vector<unsigned char> host(kBlock);
  std::mt19937_64 rng(42);
  for (int i = 0; i < blocks; ++i) {
    CHECK_CU(mem_alloc(&ptrs[i], kBlock));
    for (auto& b : host) b = static_cast<unsigned char>(rng());
    uint64_t h = 1469598103934665603ull;
    for (unsigned char b : host) h = (h ^ b) * 1099511628211ull;
    expected[i] = h;
    CHECK_CU(htod(ptrs[i], host.data(), kBlock));
  }
  CUdeviceptr out;
  CHECK_CU(mem_alloc(&out, sizeof(uint64_t)));
  int mismatches = 0;
  for (int i = blocks - 1; i >= 0; --i) {
    uint64_t n = kBlock;
    void* args[] = {&out, &ptrs[i], &n};
    CHECK_CU(launch(fnv, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
    uint64_t got = 0;
    CHECK_CU(dtoh(&got, out, sizeof(got)));
    if (got != expected[i]) ++mismatches;
  }
  CHECK_CU(sync());
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_CU(get_info(&free_bytes, &total_bytes));
  for (CUdeviceptr p : ptrs) CHECK_CU(mem_free(p));
  std::printf("blocks %d mismatches %d total %zu\n", blocks, mismatches, total_bytes);
  return mismatches == 0 ? 0 : 1;
}

// Modules, parameter layouts, kernel launches (kernelParams, `extra`, cuLaunchKernelEx, the
// library API) and the sticky CUDA_ERROR_ILLEGAL_ADDRESS.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "mixed_args.h"
#include "sim_test_util.h"

namespace memsim_test {
namespace {

using SimLaunchTest = SimTest;

TEST_F(SimLaunchTest, ParamInfoReportsNaturallyAlignedOffsets) {
  size_t offset = 0, size = 0;
  const size_t expected_offsets[] = {0, 8, 16, 20, 24};
  const size_t expected_sizes[] = {1, 8, 4, 2, 8};
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_CU(cuFuncGetParamInfo(mixed_args(), i, &offset, &size));
    EXPECT_EQ(offset, expected_offsets[i]) << i;
    EXPECT_EQ(size, expected_sizes[i]) << i;
  }
  EXPECT_EQ(cuFuncGetParamInfo(mixed_args(), 5, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetParamInfo(no_args(), 0, &offset, &size), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimLaunchTest, KernelParamsAreCopiedAtLaunchTime) {
  const int n = 4096;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  CUdeviceptr dx, dy;
  ASSERT_CU(cuMemAlloc(&dx, n * 4));
  ASSERT_CU(cuMemAlloc(&dy, n * 4));
  ASSERT_CU(cuMemcpyHtoD(dx, x.data(), n * 4));
  ASSERT_CU(cuMemcpyHtoD(dy, y.data(), n * 4));
  float a = 2.0f;
  int count = n;
  void* params[] = {&a, &dx, &dy, &count};
  ASSERT_CU(cuLaunchKernel(saxpy(), 16, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  a = 1000.0f;  // changing the argument after the launch must not affect it
  ASSERT_CU(cuMemcpyDtoH(y.data(), dy, n * 4));
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.0f * i + 1.0f) << i;
  ASSERT_CU(cuMemFree(dx));
  ASSERT_CU(cuMemFree(dy));
}

TEST_F(SimLaunchTest, ExtraParameterBufferUsesTheReportedLayout) {
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, sizeof(Mixed)));
  unsigned char buffer[32] = {};
  size_t offsets[5];
  for (size_t i = 0; i < 5; ++i)
    ASSERT_CU(cuFuncGetParamInfo(mixed_args(), i, &offsets[i], nullptr));
  const char c = 'x';
  const double d = 3.25;
  const int iv = -77;
  const short s = 1234;
  std::memcpy(buffer + offsets[0], &c, 1);
  std::memcpy(buffer + offsets[1], &d, 8);
  std::memcpy(buffer + offsets[2], &iv, 4);
  std::memcpy(buffer + offsets[3], &s, 2);
  std::memcpy(buffer + offsets[4], &out, 8);
  size_t size = sizeof(buffer);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(mixed_args(), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, extra));
  Mixed m = {};
  ASSERT_CU(cuMemcpyDtoH(&m, out, sizeof(m)));
  EXPECT_EQ(m.c, 'x');
  EXPECT_EQ(m.d, 3.25);
  EXPECT_EQ(m.i, -77);
  EXPECT_EQ(m.s, 1234);
  size_t small = 8;
  void* short_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE,
                         &small, CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(mixed_args(), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, short_extra),
            CUDA_ERROR_INVALID_VALUE);
  void* params[] = {buffer, buffer, buffer, buffer, buffer};
  EXPECT_EQ(cuLaunchKernel(mixed_args(), 1, 1, 1, 1, 1, 1, 0, nullptr, params, extra),
            CUDA_ERROR_INVALID_VALUE);  // kernelParams and extra are exclusive
  ASSERT_CU(cuMemFree(out));
}

TEST_F(SimLaunchTest, KernelSeesItsLaunchGeometryAndSharedMemory) {
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, 8 * 4));
  CUlaunchConfig cfg = {};
  cfg.gridDimX = 7;
  cfg.gridDimY = 3;
  cfg.gridDimZ = 2;
  cfg.blockDimX = 128;
  cfg.blockDimY = 2;
  cfg.blockDimZ = 1;
  cfg.sharedMemBytes = 1024;
  cfg.hStream = nullptr;
  void* params[] = {&out};
  ASSERT_CU(cuLaunchKernelEx(&cfg, geometry(), params, nullptr));
  uint32_t g[8];
  ASSERT_CU(cuMemcpyDtoH(g, out, sizeof(g)));
  EXPECT_EQ(std::vector<uint32_t>(g, g + 8), (std::vector<uint32_t>{7, 3, 2, 128, 2, 1, 1024, 1}));
  ASSERT_CU(cuMemFree(out));
}

TEST_F(SimLaunchTest, InvalidGeometryAndHandlesAreRejected) {
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, 64));
  void* params[] = {&out};
  EXPECT_EQ(cuLaunchKernel(geometry(), 0, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(geometry(), 1, 1, 1, 2048, 1, 1, 0, nullptr, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernel(geometry(), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);  // the kernel has parameters
  int dummy;
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(&dummy), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           params, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuLaunchKernel(no_args(), 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemFree(out));
}

TEST_F(SimLaunchTest, ModuleLookupErrors) {
  CUfunction f;
  EXPECT_EQ(cuModuleGetFunction(&f, module_, "does_not_exist"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleGetFunction(&f, module_, "missing_layout"), CUDA_ERROR_NOT_FOUND);
  CUmodule m;
  EXPECT_EQ(cuModuleLoad(&m, "/nonexistent/kernels.so"), CUDA_ERROR_FILE_NOT_FOUND);
  const char* name = nullptr;
  ASSERT_CU(cuFuncGetName(&name, saxpy()));
  EXPECT_STREQ(name, "saxpy");
  CUmodule owner;
  ASSERT_CU(cuFuncGetModule(&owner, saxpy()));
  EXPECT_EQ(owner, module_);
  int regs = -1;
  ASSERT_CU(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, saxpy()));
  EXPECT_EQ(regs, 1024);
}

TEST_F(SimLaunchTest, LibraryApiResolvesKernelsToFunctions) {
  CUlibrary lib;
  ASSERT_CU(
      cuLibraryLoadFromFile(&lib, MEMSIM_TEST_KERNELS, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, "fill_u32"));
  size_t offset = 0, size = 0;
  ASSERT_CU(cuKernelGetParamInfo(k, 2, &offset, &size));
  EXPECT_EQ(offset, 16u);  // uint64 after (pointer, uint32): aligned to 8
  EXPECT_EQ(size, 8u);
  CUfunction f;
  ASSERT_CU(cuKernelGetFunction(&f, k));
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 64));
  ASSERT_CU(Launch(f, nullptr, d, 0x77u, static_cast<uint64_t>(16)));
  uint32_t back[16];
  ASSERT_CU(cuMemcpyDtoH(back, d, sizeof(back)));
  for (uint32_t v : back) EXPECT_EQ(v, 0x77u);
  ASSERT_CU(cuLibraryUnload(lib));
  EXPECT_EQ(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimLaunchTest, IllegalAddressIsStickyForTheContextOnly) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(Launch(write_u32(), nullptr, d, 1u));  // freed memory: the launch itself succeeds
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Every later call on the context reports the error.
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(Launch(no_args(), nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  uint32_t v;
  EXPECT_EQ(cuMemcpyDtoH(&v, p, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  // Another context is unaffected, and the process is alive.
  CUcontext other;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, 0));
  ASSERT_CU(cuMemAlloc(&p, 4096));
  ASSERT_CU(cuMemsetD32(p, 5, 1024));
  ASSERT_CU(cuMemcpyDtoH(&v, p + 8, 4));
  EXPECT_EQ(v, 5u);
  ASSERT_CU(cuMemFree(p));
  ASSERT_CU(cuCtxDestroy(other));
}

TEST_F(SimLaunchTest, ReadingReservedButUnbackedAddressesIsAnIllegalAddress) {
  CUdeviceptr va, dst;
  ASSERT_CU(cuMemAddressReserve(&va, 2u << 20, 0, 0, 0));  // address space only, no memory
  ASSERT_CU(cuMemAlloc(&dst, 4));
  ASSERT_CU(Launch(copy_u32(), nullptr, va + 128, dst));
  EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_CU(cuMemAddressFree(va, 2u << 20));
}

// cuMemUnmap synchronizes (Note [unmap synchronizes]): an async copy from the range that was
// queued before it, even behind a kernel still running, reads the mapped memory.
TEST_F(SimLaunchTest, AsyncCopyQueuedBeforeUnmapReadsTheMappedMemory) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int* flag;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&flag), 4));
  *flag = 0;
  CUdeviceptr va;
  const size_t chunk = 2u << 20;
  ASSERT_CU(cuMemAddressReserve(&va, chunk, 0, 0, 0));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, chunk, &prop, 0));
  ASSERT_CU(cuMemMap(va, chunk, 0, h, 0));
  CUmemAccessDesc rw = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  ASSERT_CU(cuMemSetAccess(va, chunk, &rw, 1));
  const auto pattern = Pattern(1024, 12);
  ASSERT_CU(cuMemcpyHtoD(va, pattern.data(), 4096));
  ASSERT_CU(Launch(wait_flag(), s, reinterpret_cast<CUdeviceptr>(flag)));
  std::vector<uint32_t> host(1024);
  ASSERT_CU(cuMemcpyDtoHAsync(host.data(), va, 4096, s));
  // Released once this thread is blocked in cuMemUnmap (Note [waiting for a blocked thread]).
  const pid_t unmapper = ThisThreadId();
  std::thread release([flag, unmapper] {
    EXPECT_TRUE(WaitUntilSleeping(unmapper));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  });
  ASSERT_CU(cuMemUnmap(va, chunk));  // returns once the kernel and the copy ran
  release.join();
  EXPECT_EQ(Checksum(host.data(), 4096), Checksum(pattern.data(), 4096));
  EXPECT_CU(cuStreamSynchronize(s));
  cuMemRelease(h);
  cuMemAddressFree(va, chunk);
  cuMemFreeHost(flag);
  cuStreamDestroy(s);
}

}  // namespace
}  // namespace memsim_test

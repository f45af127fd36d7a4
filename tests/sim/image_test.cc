// Kernels from nvcc images (docs/sim.md, "Kernels from nvcc images"): cudart's loading sequence
// (cuLibraryLoadData of the fatbin wrapper before any context, cuLibraryGetKernel, the CUkernel
// launched as the CUfunction), every accepted image format, parameter layouts from the cubin,
// per-context `__device__` variables, the strict CUkernel/CUfunction distinction, host
// implementations from MEMSIM_KERNELS and from the process, and clean errors for bad images.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "image_args.h"
#include "image_files.h"
#include "memsim/kernel.h"
#include "sim_test_util.h"

// add_value(int* data, int value): data[i] += value for each thread of the launch. Defined in the
// test executable itself: found through RTLD_DEFAULT. The executable links the toolkit's stub
// libcuda, which lacks memsim_current_launch, so the function is looked up in the loaded driver.
extern "C" __attribute__((visibility("default"))) void _Z9add_valuePii(void** params) {
  int* data = nullptr;
  int value = 0;
  std::memcpy(&data, params[0], sizeof(data));
  std::memcpy(&value, params[1], sizeof(value));
  static const auto current_launch =
      reinterpret_cast<const memsim_launch* (*)()>(dlsym(RTLD_DEFAULT, "memsim_current_launch"));
  const memsim_launch* l = current_launch();
  for (unsigned i = 0; i < l->grid.x * l->block.x; ++i) data[i] += value;
}

namespace memsim_test {
namespace {

using namespace memsim_images;

[[maybe_unused]] const bool kConfigured =
    ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"},
                  {"MEMSIM_KERNELS", "/nonexistent/x.so:" MEMSIM_IMAGE_HOST_KERNELS}});

// nvcc's __fatBinC_Wrapper_t, as cudart hands it to cuLibraryLoadData.
struct FatbinWrapper {
  uint32_t magic;
  uint32_t version;
  const void* data;
  const void* filename_or_fatbins;
};

class SimImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MEMSIM_REQUIRE_IMAGES();
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&dev_, 0));
    fatbin_ = ReadImage("plain.fatbin");
    ASSERT_FALSE(fatbin_.empty());
  }
  void TearDown() override {
    if (lib_ != nullptr) cuLibraryUnload(lib_);
    if (ctx_ != nullptr) cuCtxDestroy(ctx_);
  }

  // cudart's sequence: the wrapper is loaded before any context exists.
  void LoadWrapper() {
    CUcontext current = nullptr;
    ASSERT_CU(cuCtxGetCurrent(&current));
    ASSERT_EQ(current, nullptr);
    wrapper_ = FatbinWrapper{0x466243B1, 1, fatbin_.data(), nullptr};
    CUlibraryOption option = CU_LIBRARY_BINARY_IS_PRESERVED;
    void* value = reinterpret_cast<void*>(1);
    ASSERT_CU(cuLibraryLoadData(&lib_, &wrapper_, nullptr, nullptr, 0, &option, &value, 1));
  }
  void CreateContext() { ASSERT_CU(cuCtxCreate(&ctx_, nullptr, 0, dev_)); }

  CUkernel Kernel(const char* name) {
    CUkernel k = nullptr;
    EXPECT_CU(cuLibraryGetKernel(&k, lib_, name));
    return k;
  }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUlibrary lib_ = nullptr;
  std::vector<unsigned char> fatbin_;
  FatbinWrapper wrapper_{};
};

TEST_F(SimImageTest, CudartSequenceLaunchesTheKernelAsFunction) {
  LoadWrapper();
  const CUkernel k = Kernel(kScale);
  unsigned count = 0;
  ASSERT_CU(cuLibraryGetKernelCount(&count, lib_));
  EXPECT_EQ(count, 5u);
  std::vector<CUkernel> all(count);
  ASSERT_CU(cuLibraryEnumerateKernels(all.data(), count, lib_));
  EXPECT_NE(std::find(all.begin(), all.end(), k), all.end());

  CreateContext();
  constexpr int kN = 1000;
  std::vector<float> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = static_cast<float>(i);
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kN * sizeof(float)));
  ASSERT_CU(cuMemcpyHtoD(d, host.data(), kN * sizeof(float)));
  float factor = 3.0f;
  int n = kN;
  void* params[] = {&d, &factor, &n};
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(k), 4, 1, 1, 256, 1, 1, 0, nullptr, params,
                           nullptr));
  // The same through the `extra` buffer, laid out by the cubin: {ptr @0, float @8, int @12}.
  unsigned char buffer[16] = {};
  factor = 0.5f;
  std::memcpy(buffer, &d, 8);
  std::memcpy(buffer + 8, &factor, 4);
  std::memcpy(buffer + 12, &n, 4);
  size_t size = sizeof(buffer);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(k), 4, 1, 1, 256, 1, 1, 0, nullptr, nullptr,
                           extra));
  std::vector<float> out(kN);
  ASSERT_CU(cuMemcpyDtoH(out.data(), d, kN * sizeof(float)));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(out[i], 1.5f * static_cast<float>(i)) << i;
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimImageTest, SixteenByteAlignedParametersFollowTheCubin) {
  LoadWrapper();
  const CUkernel k = Kernel(kAligned16);
  const size_t offsets[] = {0, 16, 32, 48, 64, 80, 96, 104};
  const size_t sizes[] = {4, 16, 3, 16, 1, 16, 2, 8};
  for (size_t i = 0; i < 8; ++i) {
    size_t offset = 0, size = 0;
    ASSERT_CU(cuKernelGetParamInfo(k, i, &offset, &size));
    EXPECT_EQ(offset, offsets[i]) << i;
    EXPECT_EQ(size, sizes[i]) << i;
  }
  size_t offset = 0;
  EXPECT_EQ(cuKernelGetParamInfo(k, 8, &offset, nullptr), CUDA_ERROR_INVALID_VALUE);

  CreateContext();
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, sizeof(double)));
  const int a = 3;
  const Float4 b{1.5f, 2, 3, 4.25f};
  const Bytes3 c{{1, 2, 9}};
  const Double2 d{0.125, 1000};
  const char e = 5;
  const Aligned16 f{7, 11};
  const short g = -2;
  // Packed by the cubin's offsets into an `extra` buffer: a natural-alignment layout would
  // put every field after the first at the wrong place.
  unsigned char buffer[112] = {};
  const void* fields[] = {&a, &b, &c, &d, &e, &f, &g, &out};
  for (size_t i = 0; i < 8; ++i) std::memcpy(buffer + offsets[i], fields[i], sizes[i]);
  size_t size = sizeof(buffer);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  ASSERT_CU(cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(k), nullptr, extra));
  double result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, out, sizeof(result)));
  EXPECT_EQ(result, Aligned16Sum(a, b, c, d, e, f, g));
  ASSERT_CU(cuMemFree(out));
}

TEST_F(SimImageTest, KernelAndFunctionHandlesAreDistinctAndStrict) {
  LoadWrapper();
  const CUkernel k = Kernel(kScale);
  size_t offset = 0;
  EXPECT_EQ(cuKernelGetFunction(nullptr, k), CUDA_ERROR_INVALID_VALUE);
  CUfunction f = nullptr;
  EXPECT_EQ(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_CONTEXT);
  CreateContext();
  ASSERT_CU(cuKernelGetFunction(&f, k));
  EXPECT_NE(reinterpret_cast<void*>(f), reinterpret_cast<void*>(k));
  ASSERT_CU(cuFuncGetParamInfo(f, 2, &offset, nullptr));
  EXPECT_EQ(offset, 12u);
  EXPECT_EQ(cuFuncGetParamInfo(reinterpret_cast<CUfunction>(k), 0, &offset, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuKernelGetParamInfo(reinterpret_cast<CUkernel>(f), 0, &offset, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  const char* name = nullptr;
  ASSERT_CU(cuKernelGetName(&name, k));
  EXPECT_STREQ(name, kScale);
  ASSERT_CU(cuFuncGetName(&name, f));
  EXPECT_STREQ(name, kScale);
  EXPECT_EQ(cuFuncGetName(&name, reinterpret_cast<CUfunction>(k)), CUDA_ERROR_INVALID_HANDLE);
  CUlibrary owner = nullptr;
  ASSERT_CU(cuKernelGetLibrary(&owner, k));
  EXPECT_EQ(owner, lib_);
  // cuModuleGetFunction on the library's module gives the same CUfunction.
  CUmodule mod = nullptr;
  ASSERT_CU(cuLibraryGetModule(&mod, lib_));
  CUfunction same = nullptr;
  ASSERT_CU(cuModuleGetFunction(&same, mod, kScale));
  EXPECT_EQ(same, f);
  // Launching the CUfunction works as well.
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, sizeof(float)));
  const float one = 2.0f;
  ASSERT_CU(cuMemcpyHtoD(d, &one, sizeof(one)));
  float factor = 4.0f;
  int n = 1;
  void* params[] = {&d, &factor, &n};
  ASSERT_CU(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
  float result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, d, sizeof(result)));
  EXPECT_EQ(result, 8.0f);
  ASSERT_CU(cuMemFree(d));
  CUkernel unknown = nullptr;
  EXPECT_EQ(cuLibraryGetKernel(&unknown, lib_, "nope"), CUDA_ERROR_NOT_FOUND);
}

TEST_F(SimImageTest, HostImplementationFromTheProcessAndMissingOnesFailCleanly) {
  LoadWrapper();
  CreateContext();
  constexpr int kThreads = 64;
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kThreads * sizeof(int)));
  ASSERT_CU(cuMemsetD32(d, 10, kThreads));
  int value = 5;
  void* params[] = {&d, &value};
  const CUkernel add = Kernel(kAddValue);
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(add), 2, 1, 1, 32, 1, 1, 0, nullptr, params,
                           nullptr));
  // No host implementation anywhere: a clean error at launch, twice, and the context survives.
  const CUkernel missing = Kernel(kNoHostImpl);
  void* missing_params[] = {&d};
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(missing), 1, 1, 1, 1, 1, 1, 0, nullptr,
                             missing_params, nullptr),
              CUDA_ERROR_NOT_FOUND);
  }
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(add), 2, 1, 1, 32, 1, 1, 0, nullptr, params,
                           nullptr));
  ASSERT_CU(cuCtxSynchronize());
  std::vector<int> out(kThreads);
  ASSERT_CU(cuMemcpyDtoH(out.data(), d, kThreads * sizeof(int)));
  for (int v : out) ASSERT_EQ(v, 20);
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimImageTest, DeviceVariablesAreInitializedPerContext) {
  LoadWrapper();
  CUdeviceptr p = 0;
  size_t bytes = 0;
  EXPECT_EQ(cuLibraryGetGlobal(&p, &bytes, lib_, "g_counter"), CUDA_ERROR_INVALID_CONTEXT);
  CreateContext();
  ASSERT_CU(cuLibraryGetGlobal(&p, &bytes, lib_, "g_counter"));
  ASSERT_EQ(bytes, 4u);
  int counter = 0;
  ASSERT_CU(cuMemcpyDtoH(&counter, p, 4));
  EXPECT_EQ(counter, 42);
  CUdeviceptr table = 0;
  ASSERT_CU(cuLibraryGetGlobal(&table, &bytes, lib_, "g_table"));
  float t[4] = {};
  ASSERT_EQ(bytes, sizeof(t));
  ASSERT_CU(cuMemcpyDtoH(t, table, sizeof(t)));
  EXPECT_EQ(t[1], 2.0f);
  CUdeviceptr zero = 0;
  ASSERT_CU(cuLibraryGetGlobal(&zero, &bytes, lib_, "g_zero"));
  std::vector<int> z(8, -1);
  ASSERT_CU(cuMemcpyDtoH(z.data(), zero, 32));
  EXPECT_EQ(z, std::vector<int>(8, 0));
  EXPECT_EQ(cuLibraryGetGlobal(&p, &bytes, lib_, "nope"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuLibraryGetManaged(&p, &bytes, lib_, "g_counter"), CUDA_ERROR_NOT_FOUND);

  // The module view gives the same copy in this context; a second context has its own.
  CUmodule mod = nullptr;
  ASSERT_CU(cuLibraryGetModule(&mod, lib_));
  CUdeviceptr again = 0;
  ASSERT_CU(cuModuleGetGlobal(&again, nullptr, mod, "g_counter"));
  EXPECT_EQ(again, p);
  const int changed = 7;
  ASSERT_CU(cuMemcpyHtoD(p, &changed, 4));
  CUcontext other = nullptr;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, dev_));
  CUdeviceptr theirs = 0;
  ASSERT_CU(cuLibraryGetGlobal(&theirs, &bytes, lib_, "g_counter"));
  EXPECT_NE(theirs, p);
  ASSERT_CU(cuMemcpyDtoH(&counter, theirs, 4));
  EXPECT_EQ(counter, 42);
  ASSERT_CU(cuCtxDestroy(other));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  ASSERT_CU(cuMemcpyDtoH(&counter, p, 4));
  EXPECT_EQ(counter, 7);

  // Unloading frees the copy: the device memory comes back.
  size_t free_with_copy = 0, free_after = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_with_copy, &total));
  ASSERT_CU(cuLibraryUnload(lib_));
  lib_ = nullptr;
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_GT(free_after, free_with_copy);
}

// A primary context reset frees the context's memory; the next look-up makes a fresh copy.
TEST_F(SimImageTest, PrimaryContextResetGivesFreshVariables) {
  LoadWrapper();
  CUcontext primary = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&primary, dev_));
  ASSERT_CU(cuCtxSetCurrent(primary));
  CUdeviceptr p = 0;
  size_t bytes = 0;
  ASSERT_CU(cuLibraryGetGlobal(&p, &bytes, lib_, "g_counter"));
  const int changed = 7;
  ASSERT_CU(cuMemcpyHtoD(p, &changed, sizeof(changed)));
  ASSERT_CU(cuDevicePrimaryCtxReset(dev_));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&primary, dev_));
  ASSERT_CU(cuCtxSetCurrent(primary));
  // An allocation that may take the old copy's place must not be mistaken for it.
  CUdeviceptr other = 0;
  ASSERT_CU(cuMemAlloc(&other, 256));
  ASSERT_CU(cuMemsetD32(other, 0, 64));
  ASSERT_CU(cuLibraryGetGlobal(&p, &bytes, lib_, "g_counter"));
  EXPECT_NE(p, other);
  int counter = 0;
  ASSERT_CU(cuMemcpyDtoH(&counter, p, sizeof(counter)));
  EXPECT_EQ(counter, 42);
  ASSERT_CU(cuMemFree(other));
  ASSERT_CU(cuDevicePrimaryCtxRelease(dev_));
  ASSERT_CU(cuCtxSetCurrent(nullptr));
}

TEST_F(SimImageTest, EveryImageFormatLoads) {
  CreateContext();
  const struct {
    const char* file;
  } cases[] = {
      {"plain.fatbin"}, {"zstd.fatbin"}, {"lz4.fatbin"}, {"multi.fatbin"}, {"kernels.cubin"}};
  for (const auto& c : cases) {
    const auto bytes = ReadImage(c.file);
    CUmodule mod = nullptr;
    ASSERT_CU(cuModuleLoadData(&mod, bytes.data())) << c.file;
    CUfunction f = nullptr;
    ASSERT_CU(cuModuleGetFunction(&f, mod, kCLinkage)) << c.file;
    CUdeviceptr d;
    ASSERT_CU(cuMemAlloc(&d, 8));
    void* params[] = {&d};
    ASSERT_CU(cuLaunchKernel(f, 3, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr));
    uint64_t out = 0;
    ASSERT_CU(cuMemcpyDtoH(&out, d, 8));
    EXPECT_EQ(out, 21u) << c.file;
    ASSERT_CU(cuMemFree(d));
    ASSERT_CU(cuModuleUnload(mod));

    CUlibrary lib = nullptr;
    ASSERT_CU(cuLibraryLoadFromFile(&lib, ImagePath(c.file).c_str(), nullptr, nullptr, 0, nullptr,
                                    nullptr, 0))
        << c.file;
    ASSERT_CU(cuLibraryUnload(lib));
    ASSERT_CU(cuModuleLoad(&mod, ImagePath(c.file).c_str())) << c.file;
    ASSERT_CU(cuModuleUnload(mod));
  }
  CUmodule mod = nullptr;
  EXPECT_EQ(cuModuleLoadFatBinary(&mod, ReadImage("ptx.fatbin").data()),
            CUDA_ERROR_NO_BINARY_FOR_GPU);
  EXPECT_EQ(cuModuleLoadData(&mod, ReadImage("sm80.fatbin").data()), CUDA_ERROR_NO_BINARY_FOR_GPU);
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(cuModuleLoadData(&mod, fatbin_.data()), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimImageTest, CapturedLaunchOfTheKernelReplays) {
  LoadWrapper();
  CreateContext();
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 32 * sizeof(int)));
  ASSERT_CU(cuMemsetD32(d, 1, 32));
  int value = 2;
  void* params[] = {&d, &value};
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(Kernel(kAddValue)), 1, 1, 1, 32, 1, 1, 0, s,
                           params, nullptr));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(s, &graph));
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) ASSERT_CU(cuGraphLaunch(exec, s));
  ASSERT_CU(cuStreamSynchronize(s));
  std::vector<int> out(32);
  ASSERT_CU(cuMemcpyDtoH(out.data(), d, 32 * sizeof(int)));
  for (int v : out) ASSERT_EQ(v, 7);
  // A kernel without host implementation invalidates the capture.
  int* unused = nullptr;
  void* missing_params[] = {&unused};
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(Kernel(kNoHostImpl)), 1, 1, 1, 1, 1, 1, 0,
                           s, missing_params, nullptr),
            CUDA_ERROR_NOT_FOUND);
  CUgraph invalid = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &invalid), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(cuStreamDestroy(s));
}

// Bytes that are not an nvcc image are still the path of a shared object of sim kernels.
TEST_F(SimImageTest, DataFormsStillTakeSharedObjectPaths) {
  CUlibrary lib = nullptr;
  ASSERT_CU(cuLibraryLoadData(&lib, MEMSIM_TEST_KERNELS, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&k, lib, "fill_u32"));
  size_t offset = 0;
  ASSERT_CU(cuKernelGetParamInfo(k, 2, &offset, nullptr));
  EXPECT_EQ(offset, 16u);
  ASSERT_CU(cuLibraryUnload(lib));
  CreateContext();
  CUmodule mod = nullptr;
  ASSERT_CU(cuModuleLoadData(&mod, MEMSIM_TEST_KERNELS));
  ASSERT_CU(cuModuleUnload(mod));
  EXPECT_EQ(cuModuleLoadData(&mod, "/nonexistent/kernels.so"), CUDA_ERROR_FILE_NOT_FOUND);
}

// Files cut short or with a corrupted byte load cleanly or fail with an image error.
TEST_F(SimImageTest, MalformedImageFilesGiveCleanErrors) {
  const std::string path =
      ::testing::TempDir() + "memsim_image_test_" + std::to_string(getpid()) + ".fatbin";
  for (const char* name : {"zstd.fatbin", "kernels.cubin"}) {
    const auto bytes = ReadImage(name);
    auto try_load = [&](const std::vector<unsigned char>& image) {
      std::ofstream(path, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(image.data()), image.size());
      CUlibrary lib = nullptr;
      const CUresult r =
          cuLibraryLoadFromFile(&lib, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
      if (r == CUDA_SUCCESS) cuLibraryUnload(lib);
      return r;
    };
    for (size_t n = 4; n < bytes.size(); n += 101) {
      const CUresult r = try_load(std::vector<unsigned char>(bytes.begin(), bytes.begin() + n));
      EXPECT_TRUE(r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_FILE_NOT_FOUND)
          << name << " cut at " << n << ": " << ErrName(r);
    }
    for (size_t i = 0; i < bytes.size(); i += 37) {
      auto copy = bytes;
      copy[i] ^= 0xff;
      const CUresult r = try_load(copy);
      EXPECT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE ||
                  r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_FILE_NOT_FOUND)
          << name << " byte " << i << ": " << ErrName(r);
    }
  }
  std::remove(path.c_str());
  // An in-memory wrapper whose fatbin pointer leads to an inaccessible page (a mapping, so
  // that sanitizers see ordinary application memory).
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  FatbinWrapper bad{0x466243B1, 1, page, nullptr};
  CUlibrary lib = nullptr;
  EXPECT_EQ(cuLibraryLoadData(&lib, &bad, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_ERROR_INVALID_IMAGE);
  munmap(page, 4096);
}

}  // namespace
}  // namespace memsim_test

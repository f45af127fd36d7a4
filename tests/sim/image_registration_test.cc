// An nvcc-compiled host object (sim/testdata/image_kernels.cu built with `nvcc -c`) linked into
// this executable registers its fatbin at start-up the way it does with NVIDIA's runtime; the
// registration entry points below only record what it registers. The test then loads the
// registered wrapper as cudart does (cuLibraryLoadData before any context), finds every
// registered kernel by its mangled name, and checks that the object's own launch stubs, which
// this executable exports under the kernels' names, are never taken as host implementations
// (Note [launch stubs] in sim/src/host_kernels.h).
#include <cstddef>
#include <string>
#include <vector>

#include "image_files.h"
#include "sim_test_util.h"

namespace {

struct Registration {
  void* wrapper = nullptr;
  std::vector<std::string> kernels;    // mangled names
  std::vector<std::string> variables;  // device names
};

std::vector<Registration>& Registrations() {
  static auto* registrations = new std::vector<Registration>;
  return *registrations;
}

}  // namespace

// The runtime entry points nvcc's host code calls (crt/host_runtime.h). Handles are 1-based
// indices into Registrations(). Launch entry points are never reached: the test launches through
// the driver API only.
extern "C" {
void** __cudaRegisterFatBinary(void* wrapper) {
  Registrations().push_back(Registration{wrapper, {}, {}});
  return reinterpret_cast<void**>(Registrations().size());
}
void __cudaRegisterFatBinaryEnd(void**) {}
void __cudaUnregisterFatBinary(void**) {}
void __cudaRegisterFunction(void** handle, const char*, char* device_fun, const char*, int, void*,
                            void*, void*, void*, int*) {
  Registrations()[reinterpret_cast<size_t>(handle) - 1].kernels.push_back(device_fun);
}
void __cudaRegisterVar(void** handle, char*, char*, const char* name, int, size_t, int, int) {
  Registrations()[reinterpret_cast<size_t>(handle) - 1].variables.push_back(name);
}
char __cudaInitModule(void**) { return 0; }
int __cudaPopCallConfiguration(void*, void*, void*, void*) { return 1; }
int __cudaGetKernel(void*, const void*) { return 1; }
int __cudaLaunchKernel(...) { return 1; }
}

namespace memsim_test {
namespace {

using namespace memsim_images;

[[maybe_unused]] const bool kConfigured =
    ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "64M"}, {"MEMSIM_KERNELS", MEMSIM_IMAGE_HOST_KERNELS}});

TEST(SimImageRegistrationTest, RegisteredWrapperLoadsAndStubsAreNotKernels) {
  ASSERT_EQ(Registrations().size(), 1u);
  const Registration& reg = Registrations()[0];
  EXPECT_EQ(reg.kernels.size(), 5u);
  EXPECT_EQ(reg.variables.size(), 3u);
  ASSERT_CU(cuInit(0));
  CUlibrary lib = nullptr;
  ASSERT_CU(cuLibraryLoadData(&lib, reg.wrapper, nullptr, nullptr, 0, nullptr, nullptr, 0));
  for (const std::string& name : reg.kernels) {
    CUkernel k = nullptr;
    EXPECT_CU(cuLibraryGetKernel(&k, lib, name.c_str())) << name;
  }
  for (const std::string& name : reg.variables) {
    CUdevice dev;
    ASSERT_CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    ASSERT_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    ASSERT_CU(cuCtxSetCurrent(ctx));
    size_t bytes = 0;
    CUdeviceptr p = 0;
    EXPECT_CU(cuLibraryGetGlobal(&p, &bytes, lib, name.c_str())) << name;
  }
  // scale has an implementation in MEMSIM_KERNELS; no_host_impl only has nvcc's launch stub in
  // this executable, which must not be called as one.
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, sizeof(float)));
  const float two = 2.0f;
  ASSERT_CU(cuMemcpyHtoD(d, &two, sizeof(two)));
  float factor = 5.0f;
  int n = 1;
  void* params[] = {&d, &factor, &n};
  CUkernel scale = nullptr, stub_only = nullptr;
  ASSERT_CU(cuLibraryGetKernel(&scale, lib, kScale));
  ASSERT_CU(cuLibraryGetKernel(&stub_only, lib, kNoHostImpl));
  ASSERT_CU(cuLaunchKernel(reinterpret_cast<CUfunction>(scale), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           params, nullptr));
  void* stub_params[] = {&d};
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(stub_only), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           stub_params, nullptr),
            CUDA_ERROR_NOT_FOUND);
  float result = 0;
  ASSERT_CU(cuMemcpyDtoH(&result, d, sizeof(result)));
  EXPECT_EQ(result, 10.0f);
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(cuLibraryUnload(lib));
}

}  // namespace
}  // namespace memsim_test

// Devices, contexts and primary contexts, per the CUDA Driver API documentation.
// Runs with MEMSIM_DEVICE_COUNT=2 and MEMSIM_DEVICE_MEMORY=256M (see CMakeLists.txt).
#include <cstring>
#include <string>
#include <thread>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured =
    ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"}, {"MEMSIM_DEVICE_COUNT", "2"}});

class SimDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_CU(cuInit(0)); }
};

TEST(SimDriver, VersionIsCuda13) {
  int v = 0;
  ASSERT_CU(cuDriverGetVersion(&v));  // documented to work before cuInit
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(cuDriverGetVersion(nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);  // Flags must be 0
}

TEST_F(SimDeviceTest, CountAndOrdinalsFollowConfiguration) {
  int n = 0;
  ASSERT_CU(cuDeviceGetCount(&n));
  EXPECT_EQ(n, 2);
  CUdevice d;
  ASSERT_CU(cuDeviceGet(&d, 1));
  EXPECT_EQ(d, 1);
  EXPECT_EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  EXPECT_EQ(cuDeviceGetName(name, sizeof(name), 5), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(SimDeviceTest, AttributesDescribeAVmmCapableComputeCapability90Device) {
  int v = 0;
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  EXPECT_EQ(v, 9);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  EXPECT_EQ(v, 0);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0));
  EXPECT_EQ(v, 32);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
  EXPECT_GT(v, 0);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
  EXPECT_EQ(v, 1);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  EXPECT_EQ(v, 1);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
  EXPECT_EQ(v, 1);
  ASSERT_CU(
      cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
  EXPECT_EQ(v, 1);
  EXPECT_EQ(cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(100000), 0),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimDeviceTest, NameUuidAndPciBusIdAreStablePerDeviceAndDistinct) {
  CUuuid a0, a1, b0;
  ASSERT_CU(cuDeviceGetUuid(&a0, 0));
  ASSERT_CU(cuDeviceGetUuid(&a1, 0));
  ASSERT_CU(cuDeviceGetUuid(&b0, 1));
  EXPECT_EQ(std::memcmp(a0.bytes, a1.bytes, 16), 0);
  EXPECT_NE(std::memcmp(a0.bytes, b0.bytes, 16), 0);
  char name[128];
  ASSERT_CU(cuDeviceGetName(name, sizeof(name), 0));
  EXPECT_GT(std::strlen(name), 0u);
  char bus[32];
  ASSERT_CU(cuDeviceGetPCIBusId(bus, sizeof(bus), 1));
  CUdevice back = -1;
  ASSERT_CU(cuDeviceGetByPCIBusId(&back, bus));
  EXPECT_EQ(back, 1);
}

TEST_F(SimDeviceTest, TotalMemIsTheConfiguredCapacity) {
  size_t total = 0;
  ASSERT_CU(cuDeviceTotalMem(&total, 0));
  EXPECT_EQ(total, 256u << 20);
}

TEST_F(SimDeviceTest, CallsNeedACurrentContext) {
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  size_t f, t;
  EXPECT_EQ(cuMemGetInfo(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext cur = reinterpret_cast<CUcontext>(0x1);
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, nullptr);
}

TEST_F(SimDeviceTest, ContextStackFollowsPushPopAndIsPerThread) {
  CUcontext a, b, cur, popped;
  ASSERT_CU(cuCtxCreate(&a, nullptr, 0, 0));  // made current
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, a);
  ASSERT_CU(cuCtxCreate(&b, nullptr, 0, 1));  // pushed on top
  CUdevice d;
  ASSERT_CU(cuCtxGetDevice(&d));
  EXPECT_EQ(d, 1);
  std::thread other([&] {
    CUcontext none = a;
    EXPECT_CU(cuCtxGetCurrent(&none));
    EXPECT_EQ(none, nullptr);  // the stack is per thread
  });
  other.join();
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(popped, b);
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, a);
  ASSERT_CU(cuCtxPushCurrent(b));
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, b);
  unsigned version = 0;
  ASSERT_CU(cuCtxGetApiVersion(b, &version));
  EXPECT_GE(version, 3020u);
  ASSERT_CU(cuCtxDestroy(b));
  ASSERT_CU(cuCtxDestroy(a));
  EXPECT_EQ(cuCtxDestroy(a), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxPushCurrent(a), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(SimDeviceTest, ContextFlagsRoundTrip) {
  CUcontext c;
  ASSERT_CU(cuCtxCreate(&c, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, 0));
  unsigned flags = 0;
  ASSERT_CU(cuCtxGetFlags(&flags));
  EXPECT_EQ(flags & CU_CTX_SCHED_MASK, static_cast<unsigned>(CU_CTX_SCHED_BLOCKING_SYNC));
  unsigned long long id1 = 0, id2 = 0;
  ASSERT_CU(cuCtxGetId(c, &id1));
  CUcontext c2;
  ASSERT_CU(cuCtxCreate(&c2, nullptr, 0, 0));
  ASSERT_CU(cuCtxGetId(c2, &id2));
  EXPECT_NE(id1, id2);
  ASSERT_CU(cuCtxDestroy(c2));
  ASSERT_CU(cuCtxDestroy(c));
}

TEST_F(SimDeviceTest, PrimaryContextIsSharedAndRefcounted) {
  unsigned flags = 0;
  int active = -1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);
  CUcontext p1, p2;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&p1, 1));
  ASSERT_CU(cuDevicePrimaryCtxRetain(&p2, 1));
  EXPECT_EQ(p1, p2);
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 1);
  EXPECT_EQ(cuCtxDestroy(p1), CUDA_ERROR_INVALID_CONTEXT);  // primary: release, not destroy
  ASSERT_CU(cuCtxSetCurrent(p1));
  CUdeviceptr mem;
  ASSERT_CU(cuMemAlloc(&mem, 1 << 20));
  ASSERT_CU(cuDevicePrimaryCtxRelease(1));
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 1);  // one reference left
  ASSERT_CU(cuDevicePrimaryCtxRelease(1));
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext cur;
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, nullptr);  // the destroyed primary context is no longer current
  ASSERT_CU(cuDevicePrimaryCtxSetFlags(1, CU_CTX_SCHED_SPIN));
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_CTX_SCHED_SPIN));
}

TEST_F(SimDeviceTest, DestroyingAContextReturnsItsMemory) {
  CUcontext c;
  ASSERT_CU(cuCtxCreate(&c, nullptr, 0, 0));
  size_t free_before, total;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, 64 << 20));
  ASSERT_CU(cuCtxDestroy(c));
  CUcontext d;
  ASSERT_CU(cuCtxCreate(&d, nullptr, 0, 0));
  size_t free_after;
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);
  ASSERT_CU(cuCtxDestroy(d));
}

TEST(SimErrors, EveryDocumentedCodeHasANameAndString) {
  const CUresult codes[] = {CUDA_SUCCESS,
                            CUDA_ERROR_INVALID_VALUE,
                            CUDA_ERROR_OUT_OF_MEMORY,
                            CUDA_ERROR_NOT_INITIALIZED,
                            CUDA_ERROR_INVALID_CONTEXT,
                            CUDA_ERROR_ILLEGAL_ADDRESS,
                            CUDA_ERROR_NOT_READY,
                            CUDA_ERROR_NOT_SUPPORTED,
                            CUDA_ERROR_NOT_FOUND,
                            CUDA_ERROR_UNKNOWN};
  for (CUresult c : codes) {
    const char* name = nullptr;
    const char* text = nullptr;
    ASSERT_CU(cuGetErrorName(c, &name));
    ASSERT_CU(cuGetErrorString(c, &text));
    ASSERT_NE(name, nullptr);
    EXPECT_EQ(std::string(name).rfind("CUDA_", 0), 0u);
    EXPECT_NE(std::string(text), "");
  }
  const char* name = nullptr;
  EXPECT_EQ(cuGetErrorName(static_cast<CUresult>(77777), &name), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(name, nullptr);
  const char* s;
  ASSERT_CU(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
}

}  // namespace
}  // namespace memsim_test

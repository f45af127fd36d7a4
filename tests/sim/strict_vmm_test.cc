// VMM rules the CUDA driver enforces and the sim once did not: per-device access granted by
// cuMemSetAccess, synchronizing cuMemUnmap, host-NUMA locations. Part of memsim_api_test
// (MEMSIM_DEVICE_COUNT=2, MEMSIM_DEVICE_MEMORY=256M; see device_context_test.cc).
#include <atomic>
#include <chrono>
#include <thread>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kChunk = 2u << 20;

class SimStrictVmmTest : public SimTest {
 protected:
  void TearDown() override {
    if (va_ != 0) {
      cuMemUnmap(va_, kChunk);
      cuMemAddressFree(va_, kChunk);
    }
    if (handle_ != 0) cuMemRelease(handle_);
    if (other_module_ != nullptr) cuModuleUnload(other_module_);
    if (other_ != nullptr) cuCtxDestroy(other_);
    SimTest::TearDown();
  }
  // Maps one device-0 chunk, read-write for device 0 only, holding `pattern`.
  void MapForDeviceZero(const std::vector<uint32_t>& pattern) {
    ASSERT_CU(cuMemAddressReserve(&va_, kChunk, 0, 0, 0));
    CUmemAllocationProp prop = PinnedProp(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    ASSERT_CU(cuMemCreate(&handle_, kChunk, &prop, 0));
    ASSERT_CU(cuMemMap(va_, kChunk, 0, handle_, 0));
    CUmemAccessDesc rw0 = DeviceAccess(0);
    ASSERT_CU(cuMemSetAccess(va_, kChunk, &rw0, 1));
    ASSERT_CU(cuMemcpyHtoD(va_, pattern.data(), pattern.size() * 4));
  }
  // A context on device 1 (made current) with the test kernels loaded.
  void EnterDeviceOne(CUfunction* write_u32_there) {
    ASSERT_CU(cuCtxCreate(&other_, nullptr, 0, 1));
    ASSERT_CU(cuModuleLoad(&other_module_, MEMSIM_TEST_KERNELS));
    ASSERT_CU(cuModuleGetFunction(write_u32_there, other_module_, "write_u32"));
  }
  uint64_t DeviceChecksum(size_t bytes) {
    std::vector<uint32_t> back(bytes / 4);
    EXPECT_CU(cuMemcpyDtoH(back.data(), va_, bytes));
    return Checksum(back.data(), bytes);
  }

  CUdeviceptr va_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  CUcontext other_ = nullptr;
  CUmodule other_module_ = nullptr;
};

TEST_F(SimStrictVmmTest, KernelOfADeviceWithoutAccessFaultsItsContextOnly) {
  const auto pattern = Pattern(1024, 3);
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(pattern));
  CUfunction write_there;
  ASSERT_NO_FATAL_FAILURE(EnterDeviceOne(&write_there));
  ASSERT_CU(Launch(write_there, nullptr, va_, 7u));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  ASSERT_CU(cuCtxSetCurrent(ctx_));  // device 0's context is unaffected, the data intact
  EXPECT_CU(cuCtxSynchronize());
  EXPECT_EQ(DeviceChecksum(4096), Checksum(pattern.data(), 4096));
}

TEST_F(SimStrictVmmTest, CopyInTheContextOfADeviceWithoutAccessFaultsItsContext) {
  const auto pattern = Pattern(1024, 4);
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(pattern));
  CUfunction unused;
  ASSERT_NO_FATAL_FAILURE(EnterDeviceOne(&unused));
  uint32_t v = 9;
  EXPECT_EQ(cuMemcpyHtoD(va_, &v, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);  // sticky
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  EXPECT_EQ(DeviceChecksum(4096), Checksum(pattern.data(), 4096));
}

TEST_F(SimStrictVmmTest, AccessIsPerDeviceAndKeptForDevicesNotNamed) {
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(Pattern(1024, 5)));
  CUmemAccessDesc ro1 = DeviceAccess(1, CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_CU(cuMemSetAccess(va_, kChunk, &ro1, 1));  // device 0 keeps read-write
  unsigned long long flags = 0;
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_CU(cuMemGetAccess(&flags, &loc, va_));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  loc.id = 1;
  ASSERT_CU(cuMemGetAccess(&flags, &loc, va_));
  EXPECT_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
  // Device 1 may now read but not write.
  CUfunction write_there;
  ASSERT_NO_FATAL_FAILURE(EnterDeviceOne(&write_there));
  uint32_t first = 0;
  EXPECT_CU(cuMemcpyDtoH(&first, va_, 4));
  EXPECT_EQ(first, Pattern(1, 5)[0]);
  EXPECT_EQ(cuMemcpyHtoD(va_, &first, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(SimStrictVmmTest, KernelOfADeviceGrantedAccessRuns) {
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(Pattern(1024, 6)));
  CUmemAccessDesc rw1 = DeviceAccess(1);
  ASSERT_CU(cuMemSetAccess(va_, kChunk, &rw1, 1));
  CUfunction write_there;
  ASSERT_NO_FATAL_FAILURE(EnterDeviceOne(&write_there));
  ASSERT_CU(Launch(write_there, nullptr, va_, 0x5eedu));
  ASSERT_CU(cuCtxSynchronize());
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, va_, 4));
  EXPECT_EQ(back, 0x5eedu);
}

TEST_F(SimStrictVmmTest, UnmapWaitsForWorkEnqueuedBeforeIt) {
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(Pattern(1024, 7)));
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // The earlier work finishes only once this thread is blocked in cuMemUnmap (Note [waiting
  // for a blocked thread]); an unmap that did not wait would find it unfinished.
  struct SlowWork {
    pid_t unmapper;
    std::atomic<bool> done{false};
  } slow_work{ThisThreadId()};
  ASSERT_CU(cuLaunchHostFunc(
      s,
      [](void* p) {
        auto* w = static_cast<SlowWork*>(p);
        WaitUntilSleeping(w->unmapper);
        w->done.store(true);
      },
      &slow_work));
  ASSERT_CU(Launch(write_u32(), s, va_, 11u));  // uses the range after the slow work
  ASSERT_CU(cuMemUnmap(va_, kChunk));
  EXPECT_TRUE(slow_work.done.load());
  EXPECT_CU(cuStreamSynchronize(s));  // the kernel ran while the range was mapped
  EXPECT_CU(cuStreamDestroy(s));
  ASSERT_CU(cuMemAddressFree(va_, kChunk));
  va_ = 0;
}

// The host function would wait for itself: NOT_PERMITTED, which the cuLaunchHostFunc
// documentation allows for CUDA calls from host functions.
TEST_F(SimStrictVmmTest, UnmapFromAHostFunctionIsNotPermitted) {
  ASSERT_NO_FATAL_FAILURE(MapForDeviceZero(Pattern(1024, 8)));
  struct Call {
    CUdeviceptr va;
    CUresult result = CUDA_ERROR_UNKNOWN;
  } call{va_};
  ASSERT_CU(cuLaunchHostFunc(
      nullptr,
      [](void* p) {
        auto* c = static_cast<Call*>(p);
        c->result = cuMemUnmap(c->va, kChunk);
      },
      &call));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(call.result, CUDA_ERROR_NOT_PERMITTED);
}

TEST_F(SimStrictVmmTest, UnmapTakesWholeMappingsOnly) {
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, 3 * kChunk, 0, 0, 0));
  CUmemAllocationProp prop = PinnedProp();
  CUmemGenericAllocationHandle two, one;
  ASSERT_CU(cuMemCreate(&two, 2 * kChunk, &prop, 0));
  ASSERT_CU(cuMemCreate(&one, kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(va, 2 * kChunk, 0, two, 0));
  ASSERT_CU(cuMemMap(va + 2 * kChunk, kChunk, 0, one, 0));
  EXPECT_EQ(cuMemUnmap(va, kChunk), CUDA_ERROR_INVALID_VALUE);  // half of a mapping
  EXPECT_EQ(cuMemUnmap(va + kChunk, 2 * kChunk), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemUnmap(va, 3 * kChunk));  // two whole mappings at once
  EXPECT_CU(cuMemRelease(two));
  EXPECT_CU(cuMemRelease(one));
  EXPECT_CU(cuMemAddressFree(va, 3 * kChunk));
}

TEST_F(SimStrictVmmTest, HostNumaCurrentIsNotAnAllocationLocation) {
  CUmemAllocationProp prop = PinnedProp(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
  CUmemGenericAllocationHandle h;
  EXPECT_EQ(cuMemCreate(&h, kChunk, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemPoolProps pool_props = {};
  pool_props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  pool_props.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  CUmemoryPool pool;
  EXPECT_EQ(cuMemPoolCreate(&pool, &pool_props), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimStrictVmmTest, HostAllocationsAreNotShareable) {
  CUmemAllocationProp prop = PinnedProp(CU_MEM_LOCATION_TYPE_HOST, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h;
  EXPECT_EQ(cuMemCreate(&h, kChunk, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  EXPECT_CU(cuMemRelease(h));
}

TEST_F(SimStrictVmmTest, HostNumaIsSupportedOnNodeZeroWithDeviceGranularity) {
  int v = -5;
  ASSERT_CU(cuDeviceGetAttribute(
      &v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
  EXPECT_EQ(v, 1);
  ASSERT_CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0));
  EXPECT_EQ(v, 0);
  for (CUmemLocationType type : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA}) {
    CUmemAllocationProp prop = PinnedProp(type, 0);
    size_t g = 0;
    ASSERT_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT_EQ(g, kChunk);
  }
  CUmemAllocationProp other_node = PinnedProp(CU_MEM_LOCATION_TYPE_HOST_NUMA, 3);
  CUmemGenericAllocationHandle h;
  EXPECT_EQ(cuMemCreate(&h, kChunk, &other_node, 0), CUDA_ERROR_INVALID_VALUE);
}

// MEMSIM_HOST_NUMA=0 models a system without host-NUMA VMM support (the probe reports the
// attributes and cuMemCreate's result for a HOST_NUMA location).
TEST(SimHostNumaSwitch, OffMakesHostNumaAllocationsUnsupported) {
  const std::string cmd = std::string("MEMSIM_HOST_NUMA=0 ") + MEMSIM_PROBE_PATH + " hostnuma";
  FILE* out = popen(cmd.c_str(), "r");
  ASSERT_NE(out, nullptr);
  int supported = -5, numa_id = -5, create = -5, host_create = -5;
  const int n = std::fscanf(out, "%d %d %d %d", &supported, &numa_id, &create, &host_create);
  EXPECT_EQ(pclose(out), 0);
  ASSERT_EQ(n, 4);
  EXPECT_EQ(supported, 0);
  EXPECT_EQ(numa_id, -1);
  EXPECT_EQ(create, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(host_create, CUDA_SUCCESS);  // HOST (no NUMA node) locations still work
}

}  // namespace
}  // namespace memsim_test

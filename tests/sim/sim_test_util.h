// Shared helpers for the simulated-GPU tests. The tests use only the CUDA driver API (cuda.h),
// so they pin the documented semantics and could run against a real driver given kernels.
#ifndef MEMVIRT_TESTS_SIM_SIM_TEST_UTIL_H_
#define MEMVIRT_TESTS_SIM_SIM_TEST_UTIL_H_

#include <cuda.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#define ASSERT_CU(expr) ASSERT_EQ((expr), CUDA_SUCCESS) << #expr
#define EXPECT_CU(expr) EXPECT_EQ((expr), CUDA_SUCCESS) << #expr

namespace memsim_test {

// Sets the simulated-device configuration of a test binary. Call it from a namespace-scope
// initializer: it then runs before main() and so before any cuInit, whether the binary runs
// under ctest or by hand.
inline bool ConfigureSim(std::vector<std::pair<const char*, const char*>> vars) {
  for (const auto& [name, value] : vars) setenv(name, value, 1);
  return true;
}

inline std::string ErrName(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s != nullptr ? s : "?";
}

// FNV-1a over bytes: the checksum used to compare data end to end.
inline uint64_t Checksum(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ULL;
  }
  return h;
}

inline std::vector<uint32_t> Pattern(size_t words, uint32_t seed) {
  std::vector<uint32_t> v(words);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& w : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w = x;
  }
  return v;
}

// Properties of a pinned physical allocation (cuMemCreate) at a location.
inline CUmemAllocationProp PinnedProp(CUmemLocationType type = CU_MEM_LOCATION_TYPE_DEVICE,
                                      int id = 0) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  return prop;
}

// An access descriptor for device `device`.
inline CUmemAccessDesc DeviceAccess(int device,
                                    CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

// Reserves `size` bytes of address space and creates a device-0 allocation of that size.
inline void ReserveAndCreate(size_t size, CUdeviceptr* va, CUmemGenericAllocationHandle* h) {
  ASSERT_CU(cuMemAddressReserve(va, size, 0, 0, 0));
  CUmemAllocationProp prop = PinnedProp();
  ASSERT_CU(cuMemCreate(h, size, &prop, 0));
}

// Launches f with the given arguments through kernelParams.
template <typename... Args>
CUresult Launch(CUfunction f, CUstream s, Args... args) {
  void* params[] = {static_cast<void*>(&args)..., nullptr};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, sizeof...(Args) ? params : nullptr, nullptr);
}

// Per-test context on device 0 with the test kernel module loaded.
class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuDeviceGet(&dev_, 0));
    ASSERT_CU(cuCtxCreate(&ctx_, nullptr, 0, dev_));
    ASSERT_CU(cuModuleLoad(&module_, MEMSIM_TEST_KERNELS));
    for (const char* name : {"fill_u32", "saxpy", "record_order", "wait_flag", "write_u32",
                             "copy_u32", "geometry", "mixed_args", "sum_u32", "no_args"}) {
      CUfunction f;
      ASSERT_CU(cuModuleGetFunction(&f, module_, name));
      fn_.push_back(f);
    }
  }
  void TearDown() override {
    if (module_ != nullptr) cuModuleUnload(module_);
    if (ctx_ != nullptr) cuCtxDestroy(ctx_);
  }

  CUfunction fill() const { return fn_[0]; }
  CUfunction saxpy() const { return fn_[1]; }
  CUfunction record_order() const { return fn_[2]; }
  CUfunction wait_flag() const { return fn_[3]; }
  CUfunction write_u32() const { return fn_[4]; }
  CUfunction copy_u32() const { return fn_[5]; }
  CUfunction geometry() const { return fn_[6]; }
  CUfunction mixed_args() const { return fn_[7]; }
  CUfunction sum_u32() const { return fn_[8]; }
  CUfunction no_args() const { return fn_[9]; }

  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> fn_;
};

}  // namespace memsim_test

#endif  // MEMVIRT_TESTS_SIM_SIM_TEST_UTIL_H_

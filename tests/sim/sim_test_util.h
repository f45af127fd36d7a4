// Shared helpers for the simulated-GPU tests. The tests use only the CUDA driver API (cuda.h),
// so they pin the documented semantics and could run against a real driver given kernels.
#ifndef MEMVIRT_TESTS_SIM_SIM_TEST_UTIL_H_
#define MEMVIRT_TESTS_SIM_SIM_TEST_UTIL_H_

#include <cuda.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
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

// Note [waiting for a blocked thread]
// A test that checks that work does NOT run before something else (a cross-stream wait, the
// legacy stream's implicit synchronization) must look once the thread that would run it has
// done all it can: a sleep would let a wrong implementation pass when its thread is slow. So the
// test waits, without a time bound that could decide the outcome, until that thread sleeps in
// the kernel (state S in /proc): a stream worker blocked on a dependency, or idle after running
// what it had. Then whatever that stream could run has run. The same serves a thread that must
// release work only once another thread is blocked in a synchronous call. (The sim runs each
// stream on a worker thread of its own, sim/src/stream.h; StreamWorker finds it.)

inline pid_t ThisThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// Whether thread `tid` of this process sleeps (state S in /proc/self/task/<tid>/stat).
inline bool ThreadSleeping(pid_t tid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char line[512] = {};
  const bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  const char* after_name = read ? std::strrchr(line, ')') : nullptr;
  return after_name != nullptr && after_name[1] == ' ' && after_name[2] == 'S';
}

// Waits until thread `tid` sleeps (Note [waiting for a blocked thread]). False only if it
// never does within a minute: a hang, not a timing outcome.
inline bool WaitUntilSleeping(pid_t tid) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!ThreadSleeping(tid)) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

// A host function enqueued on a stream ahead of the work under test: it holds the stream's
// worker until Open() (so the test enqueues everything first), and WaitBlockedAfter() waits
// until the worker ran it and then sleeps (Note [waiting for a blocked thread]): whatever the
// stream could run after it without waiting has run by then.
class WorkerProbe {
 public:
  CUresult Enqueue(CUstream s) { return cuLaunchHostFunc(s, &Run, this); }
  void Open() { open_.store(true, std::memory_order_release); }
  bool WaitBlockedAfter() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (!ran_.load(std::memory_order_acquire)) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::yield();
    }
    return WaitUntilSleeping(tid_.load());
  }

 private:
  static void CUDA_CB Run(void* p) {
    auto* self = static_cast<WorkerProbe*>(p);
    self->tid_.store(ThisThreadId());
    while (!self->open_.load(std::memory_order_acquire)) std::this_thread::yield();
    self->ran_.store(true, std::memory_order_release);
  }
  std::atomic<bool> open_{false};
  std::atomic<bool> ran_{false};
  std::atomic<pid_t> tid_{0};
};

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

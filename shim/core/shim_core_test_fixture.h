// The ShimCore test fixture over the fake driver: a core with small budgets,
// pattern writes and checksummed reads through decoded "kernels".
#ifndef MEMVIRT_SHIM_CORE_SHIM_CORE_TEST_FIXTURE_H_
#define MEMVIRT_SHIM_CORE_SHIM_CORE_TEST_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "shim/core/shim_core.h"
#include "shim/testing/fake_driver.h"

namespace memvirt::shim {

inline constexpr uint64_t kMiB = 1ull << 20;

inline uint64_t Checksum(const void* p, uint64_t bytes) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

inline void FillPattern(void* p, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  uint64_t* w = static_cast<uint64_t*>(p);
  for (uint64_t i = 0; i < bytes / 8; ++i) w[i] = rng();
}

inline uint64_t PatternChecksum(uint64_t bytes, uint64_t seed) {
  std::vector<uint64_t> buf(bytes / 8);
  FillPattern(buf.data(), bytes, seed);
  return Checksum(buf.data(), bytes);
}

// Tests of Note [waits outside the lock]: a driver whose cuEventSynchronize
// first runs `during_event_sync` (once: taken out before it runs).
inline std::function<void()> during_event_sync;
inline decltype(Driver::cuEventSynchronize) forwarded_event_sync = nullptr;
inline CUresult EventSyncWithHook(CUevent event) {
  if (std::function<void()> hook = std::exchange(during_event_sync, nullptr)) hook();
  return forwarded_event_sync(event);
}
// `base` with cuEventSynchronize hooked. One at a time: the driver is static
// (it outlives the core, which a fixture destroys last).
inline const Driver* HookEventSync(const Driver& base) {
  static Driver hooked;
  hooked = base;
  forwarded_event_sync = base.cuEventSynchronize;
  hooked.cuEventSynchronize = &EventSyncWithHook;
  return &hooked;
}

class ShimCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(&fake_.driver(), 8 * kMiB, 64 * kMiB); }

  void Make(const Driver* driver, uint64_t device_budget, uint64_t host_budget,
            const char* policy = nullptr, ControlPlane* control = nullptr) {
    core_.reset();
    CoreOptions options;
    if (policy != nullptr) options.policy = policy;
    options.device_budget = device_budget;
    options.host_budget = host_budget;
    options.va_bytes = 256 * kMiB;
    options.event_batch = 4;
    options.event_pace = 0;  // a batched event every 4 operations, independent of timing
    options.lookahead_min_chunks = lookahead_min_chunks_;
    options.host_ledger = host_ledger_;
    options.overflow_ledger = overflow_ledger_;
    options.host_peers = host_peers_;
    ASSERT_EQ(ShimCore::Create(driver, options, control != nullptr ? control : &control_, &core_),
              CUDA_SUCCESS);
  }

  // A new FaultInjector over the fake driver (the core is dropped first: it
  // may use the previous one). Tests arm failures with faults_->Fail*() and
  // clear them with Disarm(); TearDown destroys the core before the injector.
  testing::FaultInjector* NewFaultInjector() {
    core_.reset();
    faults_.reset();  // before the new one: an injector's destructor unregisters the live one
    faults_ = std::make_unique<testing::FaultInjector>(fake_.driver());
    return faults_.get();
  }
  // Make() over a new FaultInjector.
  void MakeWithFaults(uint64_t device_budget, uint64_t host_budget, const char* policy = nullptr,
                      ControlPlane* control = nullptr) {
    Make(&NewFaultInjector()->driver(), device_budget, host_budget, policy, control);
  }
  void Disarm() { faults_->ClearFaults(); }
  void TearDown() override {
    core_.reset();
    faults_.reset();
  }

  CUfunction Function(size_t pointer_args) {
    while (functions_.size() <= pointer_args) {
      functions_.push_back(fake_.MakeFunction(std::vector<uint32_t>(functions_.size(), 8)));
    }
    return functions_[pointer_args];
  }

  // A "kernel" taking `ptrs` as arguments whose body runs `body` once every
  // byte of every [ptr, ptr + bytes) is found mapped.
  CUresult Launch(CUstream stream, std::vector<CUdeviceptr> ptrs, uint64_t bytes,
                  std::function<void()> body, CUfunction f = nullptr) {
    std::vector<void*> params;
    for (CUdeviceptr& p : ptrs) params.push_back(&p);
    ShimCore::Ticket ticket;
    CUresult r = core_->BeforeLaunch(f != nullptr ? f : Function(ptrs.size()), params.data(),
                                     nullptr, stream, false, &ticket);
    if (r != CUDA_SUCCESS) return r;
    for (size_t i = 0; i + 1 < ptrs.size(); ++i) fake_.EnqueueTouch(stream, ptrs[i], bytes, {});
    fake_.EnqueueTouch(stream, ptrs.back(), bytes, std::move(body));
    return CUDA_SUCCESS;
  }

  CUresult Write(CUstream s, CUdeviceptr p, uint64_t bytes, uint64_t seed) {
    return Launch(s, {p}, bytes,
                  [p, bytes, seed] { FillPattern(reinterpret_cast<void*>(p), bytes, seed); });
  }
  CUresult Read(CUstream s, CUdeviceptr p, uint64_t bytes, uint64_t* sum) {
    return Launch(s, {p}, bytes,
                  [p, bytes, sum] { *sum = Checksum(reinterpret_cast<void*>(p), bytes); });
  }

  // Properties of physical memory the application creates (cuMemCreate):
  // pinned on device 0, exportable as a file descriptor.
  static CUmemAllocationProp AppProp() {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }

  // A virtual handle of `bytes` (AppProp()) created and mapped in a
  // reservation of its own at *base. Use under ASSERT_NO_FATAL_FAILURE.
  void MapAppHandle(uint64_t bytes, CUdeviceptr* base, CUmemGenericAllocationHandle* handle) {
    ASSERT_EQ(core_->AppReserve(bytes, 0, base), CUDA_SUCCESS);
    ASSERT_EQ(core_->AppCreate(bytes, AppProp(), handle), CUDA_SUCCESS);
    ASSERT_EQ(core_->AppMap(*base, bytes, 0, *handle), CUDA_SUCCESS);
  }

  // The checksum of the first `bytes` of exported descriptor `fd` (closed
  // here), as a process importing it reads them; 0 if it cannot be mapped.
  static uint64_t ExportedChecksum(int fd, uint64_t bytes) {
    void* exported = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
    uint64_t sum = 0;
    if (exported != MAP_FAILED) {
      sum = Checksum(exported, bytes);
      munmap(exported, bytes);
    }
    close(fd);
    return sum;
  }

  // Each (block, seed) of `blocks` reads back FillPattern(bytes, seed) on `s`.
  void ExpectPatterns(CUstream s, uint64_t bytes,
                      const std::vector<std::pair<CUdeviceptr, uint64_t>>& blocks) {
    for (const auto& [p, seed] : blocks) {
      uint64_t sum = 0;
      ASSERT_EQ(Read(s, p, bytes, &sum), CUDA_SUCCESS);
      EXPECT_EQ(sum, PatternChecksum(bytes, seed)) << "block seeded " << seed;
    }
  }

  testing::FakeDriver fake_{64 * kMiB};
  StandaloneControlPlane control_;
  std::unique_ptr<testing::FaultInjector> faults_;  // MakeWithFaults()
  std::unique_ptr<ShimCore> core_;
  std::vector<CUfunction> functions_;
  // CoreOptions::lookahead_min_chunks of the next Make(): tests of the
  // look-ahead page-out lower it to their small budgets.
  uint32_t lookahead_min_chunks_ = kLookaheadMinChunks;
  // CoreOptions::host_ledger, overflow_ledger and host_peers of the next
  // Make(): tests of cores sharing one host budget set them.
  HostLedger* host_ledger_ = nullptr;
  OverflowLedger* overflow_ledger_ = nullptr;
  HostPeers* host_peers_ = nullptr;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_SHIM_CORE_TEST_FIXTURE_H_

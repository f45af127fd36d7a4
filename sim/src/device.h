// One simulated device: capacity account, address space, copy engines, primary context.
//
// Thread safety: thread-safe. Devices are created by cuInit and live until process exit.
#ifndef MEMSIM_SRC_DEVICE_H_
#define MEMSIM_SRC_DEVICE_H_

#include <memory>
#include <mutex>
#include <string>

#include "address_space.h"
#include "capacity.h"
#include "copy_engine.h"
#include "cuda_api.h"

namespace memsim {

class Context;
struct Config;
class MemPool;

class Device {
 public:
  // nullptr when the address space cannot be reserved.
  static std::unique_ptr<Device> Create(int ordinal, const Config& config);

  int ordinal() const { return ordinal_; }
  CapacityAccount& capacity() { return *capacity_; }
  AddressSpace& va() { return *va_; }
  CopyEngine& h2d() { return h2d_; }
  CopyEngine& d2h() { return d2h_; }
  const CUuuid& uuid() const { return uuid_; }
  const std::string& name() const { return name_; }
  bool shared_capacity() const { return shared_capacity_; }
  // HOST_NUMA locations usable with the VMM API (MEMSIM_HOST_NUMA).
  bool host_numa_vmm() const { return host_numa_vmm_; }

  // cuDeviceGetAttribute. CUDA_ERROR_INVALID_VALUE for values outside the enum.
  CUresult Attribute(CUdevice_attribute attr, int* value) const;

  // Primary context (cuDevicePrimaryCtx*). The object is created on first use and kept for the
  // device's lifetime, so its handle stays valid across release and reset, as the runtime
  // expects (it makes the old handle current again after cudaDeviceReset). Retain adds a
  // reference (active while references remain); Peek returns it without one (the runtime's
  // private interface asks for it that way). Release and Reset return it when it became
  // inactive, for the caller to free its resources (DeactivatePrimaryContext); else nullptr.
  std::shared_ptr<Context> RetainPrimary();
  std::shared_ptr<Context> PeekPrimary();
  std::shared_ptr<Context> ReleasePrimary(CUresult* status);
  std::shared_ptr<Context> ResetPrimary();
  void PrimaryState(unsigned* flags, int* active);
  void SetPrimaryFlags(unsigned flags);

  std::shared_ptr<MemPool> default_pool() const { return default_pool_; }
  std::shared_ptr<MemPool> current_pool();
  void set_current_pool(std::shared_ptr<MemPool> pool);

 private:
  Device(int ordinal, std::unique_ptr<CapacityAccount> capacity, std::unique_ptr<AddressSpace> va,
         const Config& config, bool shared_capacity);

  const int ordinal_;
  std::unique_ptr<CapacityAccount> capacity_;
  std::unique_ptr<AddressSpace> va_;
  CopyEngine h2d_;
  CopyEngine d2h_;
  CUuuid uuid_;
  std::string name_;
  const bool shared_capacity_;
  const bool host_numa_vmm_;

  std::mutex mu_;
  std::shared_ptr<Context> primary_;
  int primary_refs_ = 0;
  unsigned primary_flags_ = 0;
  std::shared_ptr<MemPool> default_pool_;
  std::shared_ptr<MemPool> current_pool_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_DEVICE_H_

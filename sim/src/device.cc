#include "device.h"

#include <cstdio>
#include <cstring>

#include "config.h"
#include "context.h"
#include "mem_pool.h"
#include "node_capacity.h"

namespace memsim {

namespace {

// FNV-1a 64 over `text`, seeded, for stable UUIDs.
uint64_t Fnv1a(const std::string& text, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

CUuuid MakeUuid(const std::string& node, int ordinal) {
  const std::string key =
      "memsim:" + (node.empty() ? std::string("local") : node) + ":" + std::to_string(ordinal);
  const uint64_t a = Fnv1a(key, 0);
  const uint64_t b = Fnv1a(key, 0x9e3779b97f4a7c15ULL);
  CUuuid u;
  std::memcpy(u.bytes, &a, 8);
  std::memcpy(u.bytes + 8, &b, 8);
  u.bytes[6] = static_cast<char>((u.bytes[6] & 0x0f) | 0x40);  // RFC 4122 version 4 layout
  u.bytes[8] = static_cast<char>((u.bytes[8] & 0x3f) | 0x80);
  return u;
}

}  // namespace

std::unique_ptr<Device> Device::Create(int ordinal, const Config& config) {
  auto va = AddressSpace::Create(config.va_size);
  if (!va) return nullptr;
  std::unique_ptr<CapacityAccount> capacity;
  bool shared = false;
  if (!config.node.empty()) {
    capacity = NodeCapacity::Open(config.node, ordinal, config.device_memory);
    if (capacity) {
      shared = true;
    } else {
      std::fprintf(stderr,
                   "memsim: cannot open node segment for MEMSIM_NODE='%s'; device %d capacity "
                   "is private to this process\n",
                   config.node.c_str(), ordinal);
    }
  }
  if (!capacity) capacity = std::make_unique<LocalCapacity>(config.device_memory);
  return std::unique_ptr<Device>(
      new Device(ordinal, std::move(capacity), std::move(va), config, shared));
}

Device::Device(int ordinal, std::unique_ptr<CapacityAccount> capacity,
               std::unique_ptr<AddressSpace> va, const Config& config, bool shared_capacity)
    : ordinal_(ordinal),
      capacity_(std::move(capacity)),
      va_(std::move(va)),
      h2d_(config.h2d_gbps),
      d2h_(config.d2h_gbps),
      uuid_(MakeUuid(config.node, ordinal)),
      name_("memsim Simulated GPU"),
      shared_capacity_(shared_capacity),
      host_numa_vmm_(config.host_numa) {
  CUmemPoolProps props;
  std::memset(&props, 0, sizeof(props));
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = ordinal;
  default_pool_ = std::make_shared<MemPool>(this, props);
  current_pool_ = default_pool_;
}

std::shared_ptr<MemPool> Device::current_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  return current_pool_;
}

void Device::set_current_pool(std::shared_ptr<MemPool> pool) {
  std::lock_guard<std::mutex> lock(mu_);
  current_pool_ = std::move(pool);
}

CUresult Device::Attribute(CUdevice_attribute attr, int* value) const {
  if (attr <= 0 || attr >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  int v = 0;
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      v = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      v = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      v = 49152;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      v = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      v = 1980000;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      v = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      v = 132;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE:
      v = CU_COMPUTEMODE_DEFAULT;
      break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      v = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      v = ordinal_ + 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      v = 2619000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      v = 5120;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      v = 50 * 1024 * 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      v = 2048;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      v = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      v = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      v = 233472;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      v = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
      v = ordinal_;
      break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      v = 2;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      v = 232448;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE:
      v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      v = CU_MEM_HANDLE_TYPE_NONE;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_CONFIG:
      v = CU_DEVICE_NUMA_CONFIG_NONE;
      break;
    case CU_DEVICE_ATTRIBUTE_NUMA_ID:
      v = -1;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID:  // -1: the system does not support NUMA
      v = host_numa_vmm_ ? 0 : -1;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      v = host_numa_vmm_ ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      v = 1;
      break;
    // Note [stream memory operations] in api_stream_memops.cc. The v2 operations are
    // available on every platform; the v1 attributes describe the legacy API, disabled unless
    // the kernel module enables it: an H200 (driver 580) answers 0 for
    // CAN_USE_STREAM_MEM_OPS_V1 (tests/gpu/reference/).
    case CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR:
      v = 1;
      break;
    default:
      v = 0;
      break;
  }
  *value = v;
  return CUDA_SUCCESS;
}

std::shared_ptr<Context> Device::RetainPrimary() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!primary_) primary_ = std::make_shared<Context>(this, primary_flags_, true);
  ++primary_refs_;
  return primary_;
}

std::shared_ptr<Context> Device::PeekPrimary() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!primary_) primary_ = std::make_shared<Context>(this, primary_flags_, true);
  return primary_;
}

std::shared_ptr<Context> Device::ReleasePrimary(CUresult* status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!primary_ || primary_refs_ == 0) {
    *status = CUDA_ERROR_INVALID_CONTEXT;
    return nullptr;
  }
  *status = CUDA_SUCCESS;
  if (--primary_refs_ > 0) return nullptr;
  return primary_;
}

std::shared_ptr<Context> Device::ResetPrimary() {
  std::lock_guard<std::mutex> lock(mu_);
  primary_refs_ = 0;
  return primary_;
}

void Device::PrimaryState(unsigned* flags, int* active) {
  std::lock_guard<std::mutex> lock(mu_);
  *flags = primary_flags_;
  *active = primary_refs_ > 0 ? 1 : 0;
}

void Device::SetPrimaryFlags(unsigned flags) {
  std::lock_guard<std::mutex> lock(mu_);
  primary_flags_ = flags;
  if (primary_) primary_->set_flags(flags);
}

}  // namespace memsim

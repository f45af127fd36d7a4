#include "daemon/server/driver_inventory.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace memvirt::daemon {
namespace {

// The driver API's types as the daemon needs them (cuda.h; the daemon builds without it).
using CuResult = int;
using CuDevice = int;
struct CuUuid {
  unsigned char bytes[16];
};
constexpr CuResult kCudaSuccess = 0;

struct DriverCalls {
  CuResult (*init)(unsigned int) = nullptr;
  CuResult (*device_count)(int*) = nullptr;
  CuResult (*device_get)(CuDevice*, int) = nullptr;
  CuResult (*device_uuid)(CuUuid*, CuDevice) = nullptr;
  CuResult (*total_mem)(size_t*, CuDevice) = nullptr;
};

template <typename F>
bool Bind(void* library, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  return *out != nullptr;
}

}  // namespace

std::string GpuUuidString(const unsigned char (&bytes)[16]) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[bytes[i] >> 4];
    out += kHex[bytes[i] & 15];
  }
  return out;
}

DriverInventory QueryDriverInventory(const std::string& library) {
  DriverInventory inventory;
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    inventory.problem = absl::StrCat("cannot load ", library, ": ", why != nullptr ? why : "?");
    return inventory;
  }
  DriverCalls cu;
  if (!Bind(handle, "cuInit", &cu.init) || !Bind(handle, "cuDeviceGetCount", &cu.device_count) ||
      !Bind(handle, "cuDeviceGet", &cu.device_get) ||
      !Bind(handle, "cuDeviceTotalMem_v2", &cu.total_mem) ||
      (!Bind(handle, "cuDeviceGetUuid_v2", &cu.device_uuid) &&
       !Bind(handle, "cuDeviceGetUuid", &cu.device_uuid))) {
    inventory.problem = absl::StrCat(library, " lacks a driver API entry point the query needs");
    return inventory;
  }
  if (const CuResult r = cu.init(0); r != kCudaSuccess) {
    inventory.problem = absl::StrCat("cuInit failed (", r, ")");
    return inventory;
  }
  int count = 0;
  if (const CuResult r = cu.device_count(&count); r != kCudaSuccess || count <= 0) {
    inventory.problem = r != kCudaSuccess ? absl::StrCat("cuDeviceGetCount failed (", r, ")")
                                          : std::string("the driver reports no device");
    return inventory;
  }
  for (int i = 0; i < count; ++i) {
    CuDevice device = 0;
    CuUuid uuid{};
    size_t bytes = 0;
    if (cu.device_get(&device, i) != kCudaSuccess ||
        cu.device_uuid(&uuid, device) != kCudaSuccess ||
        cu.total_mem(&bytes, device) != kCudaSuccess || bytes == 0) {
      inventory.gpus.clear();
      inventory.problem = absl::StrCat("the driver could not describe device ", i);
      return inventory;
    }
    inventory.gpus.push_back({GpuUuidString(uuid.bytes), static_cast<uint64_t>(bytes)});
  }
  return inventory;
}

}  // namespace memvirt::daemon

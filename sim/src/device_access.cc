#include "device_access.h"

#include <cstring>

#include "device.h"
#include "driver.h"

namespace memsim {

bool DeviceDenied(const Device& accessor, uint64_t addr, uint64_t size, bool write) {
  Device* owner = Driver::Get().DeviceForAddress(addr);
  return owner != nullptr && owner->va().DeniesDevice(addr, size, accessor.ordinal(), write);
}

bool ArgsReachDeniedMemory(const Device& accessor, const void* args, size_t bytes) {
  const auto* base = static_cast<const unsigned char*>(args);
  for (size_t off = 0; off + sizeof(uint64_t) <= bytes; off += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, base + off, sizeof(word));
    if (DeviceDenied(accessor, word, 0, /*write=*/false)) return true;
  }
  return false;
}

}  // namespace memsim

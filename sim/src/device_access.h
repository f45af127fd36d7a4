// Per-device access checks of device work (Note [per-device access] in address_space.h).
//
// The MMU of the host enforces the widest access any device holds; these checks refuse the work
// of a device that holds none, as its own MMU would. Device work calls them on its stream worker
// right before it runs and then sets the sticky CUDA_ERROR_ILLEGAL_ADDRESS instead of running.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_DEVICE_ACCESS_H_
#define MEMSIM_SRC_DEVICE_ACCESS_H_

#include <cstddef>
#include <cstdint>

namespace memsim {

class Device;

// True when [addr, addr + size) reaches VMM memory that `accessor` may not read (or write, with
// `write`). Addresses outside every device's address space are never denied.
bool DeviceDenied(const Device& accessor, uint64_t addr, uint64_t size, bool write);

// True when an 8-byte-aligned word of a kernel's packed arguments [args, args + bytes) is an
// address `accessor` has no access to. The sim cannot tell pointers from other values, so it
// treats every word that falls into a mapping as a pointer the kernel dereferences.
bool ArgsReachDeniedMemory(const Device& accessor, const void* args, size_t bytes);

}  // namespace memsim

#endif  // MEMSIM_SRC_DEVICE_ACCESS_H_

// The daemon's own query of the node's GPUs (Note [GPU inventory] in daemon/core/node_state.h):
// loads the CUDA driver library with dlopen and enumerates the devices, their UUIDs (nvidia-smi's
// spelling, as the shim reports them) and total memory. The driver is a trusted source of sizes;
// a node without a driver (or without devices) yields an empty inventory and a reason, never an
// error, so the daemon starts anyway.
//
// Thread safety: call once at startup, before other threads use the driver library.
#ifndef MEMVIRT_DAEMON_SERVER_DRIVER_INVENTORY_H_
#define MEMVIRT_DAEMON_SERVER_DRIVER_INVENTORY_H_

#include <string>
#include <vector>

#include "daemon/core/node_state.h"

namespace memvirt::daemon {

struct DriverInventory {
  std::vector<StaticGpu> gpus;  // in device order; empty if none could be read
  std::string problem;          // why `gpus` is empty; empty when devices were found
};

// Queries the driver in `library` (a dlopen name: "libcuda.so.1" follows the library path).
// The library stays loaded for the process's lifetime.
DriverInventory QueryDriverInventory(const std::string& library);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for the driver's 16 UUID bytes.
std::string GpuUuidString(const unsigned char (&bytes)[16]);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_DRIVER_INVENTORY_H_

// The boundary between libmemshim.so and its daemon link plugin
// (libmemshim_daemon.so), which is dlopen'ed only when a daemon socket exists.
//
// Note [daemon link as a plugin]
//   The daemon client speaks gRPC, which brings gRPC, protobuf, abseil and
//   glog into the process. libmemshim.so is preloaded into every application,
//   including ones that never talk to a daemon and ones that bundle their own
//   copies of those libraries; so the shim itself links none of them and
//   loads the plugin with RTLD_LOCAL, lazily, when the core is created and the
//   socket exists. RTLD_DEEPBIND is deliberately not used: it would bind the
//   plugin's malloc/free to the C library's even in applications that preload
//   another allocator (jemalloc, tcmalloc), while objects cross the boundary.
//   The remaining risk, an executable that itself exports gRPC or protobuf
//   symbols of another version, is avoided with MEMSHIM_DAEMON=off.
//
// Both sides are built from the same tree with the same compiler; the ABI
// version guards against a plugin from another build.
#ifndef MEMVIRT_SHIM_DAEMON_LINK_DAEMON_LINK_ABI_H_
#define MEMVIRT_SHIM_DAEMON_LINK_DAEMON_LINK_ABI_H_

#include <cstdint>

#include "shim/core/control_plane.h"

namespace memvirt::shim {

inline constexpr uint32_t kDaemonLinkAbiVersion = 3;  // 3: ControlPlane::ForDevice
inline constexpr char kDaemonLinkEntryPoint[] = "memshim_daemon_link_create";
inline constexpr char kDaemonLinkLibrary[] = "libmemshim_daemon.so";

struct DaemonLinkOptions {
  uint32_t abi_version = kDaemonLinkAbiVersion;
  const char* socket_path = nullptr;   // Required.
  uint32_t connect_timeout_ms = 2000;  // Wait for registration at most this long.
  uint32_t report_interval_ms = 200;   // Usage and hint batches.
  uint64_t demand_device_bytes = 0;    // 0: as much as the daemon grants.
  uint64_t min_device_bytes = 0;       // Floor asked of the daemon.
  uint64_t demand_host_bytes = 0;      // 0: the daemon's default share.
  int log_level = 2;                   // memvirt::shim::LogLevel of the shim
  uint32_t staging_slots = 8;          // NVMe tier staging buffers; 0 = do not use the tier
};

// Returns a new control plane (owned by the caller), or null with `error`
// (a static string) set. Thread-safe.
using DaemonLinkCreateFn = ControlPlane* (*)(const DaemonLinkOptions* options, const char** error);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_DAEMON_LINK_DAEMON_LINK_ABI_H_

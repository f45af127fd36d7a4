// Loads the daemon link plugin (Note [daemon link as a plugin] in
// shim/daemon_link/daemon_link_abi.h).
//
// Thread safety: call under the runtime's core-creation lock.
#ifndef MEMVIRT_SHIM_HOOKS_DAEMON_PLUGIN_H_
#define MEMVIRT_SHIM_HOOKS_DAEMON_PLUGIN_H_

#include "shim/core/config.h"
#include "shim/core/control_plane.h"

namespace memvirt::shim::hooks {

// Returns a control plane connected to the daemon at `socket`, or null if the
// daemon link is off, the socket does not exist or the plugin cannot be
// loaded (each logged once). The result lives until exit.
ControlPlane* LoadDaemonControlPlane(const ShimConfig& config, const char* socket);

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_DAEMON_PLUGIN_H_

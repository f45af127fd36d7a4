#include "shim/hooks/daemon_plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <string>

#include "shim/core/log.h"
#include "shim/daemon_link/daemon_link_abi.h"
#include "shim/hooks/libc_symbols.h"

namespace memvirt::shim::hooks {
namespace {

// The directory libmemshim.so was loaded from, with a trailing '/'.
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LoadDaemonControlPlane), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

}  // namespace

ControlPlane* LoadDaemonControlPlane(const ShimConfig& config, const char* socket) {
  if (config.daemon_off) {
    MEMSHIM_LOG(kInfo, "MEMSHIM_DAEMON=off: running standalone");
    return nullptr;
  }
  struct stat st;
  if (stat(socket, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    MEMSHIM_LOG(kInfo, "no daemon at %s: running standalone", socket);
    return nullptr;
  }
  const std::string plugin =
      config.daemon_plugin.empty() ? OwnDirectory() + kDaemonLinkLibrary : config.daemon_plugin;
  void* handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    MEMSHIM_LOG(kWarn,
                "daemon socket %s found, but the daemon link %s cannot be loaded (%s); "
                "running standalone",
                socket, plugin.c_str(), dlerror());
    return nullptr;
  }
  DlsymFn real_dlsym = RealDlsym();
  auto create = reinterpret_cast<DaemonLinkCreateFn>(
      real_dlsym != nullptr ? real_dlsym(handle, kDaemonLinkEntryPoint) : nullptr);
  if (create == nullptr) {
    MEMSHIM_LOG(kWarn, "%s has no %s; running standalone", plugin.c_str(), kDaemonLinkEntryPoint);
    return nullptr;  // the handle stays loaded: it may have run initializers
  }
  DaemonLinkOptions options;
  options.socket_path = socket;
  options.connect_timeout_ms = config.daemon_timeout_ms;
  options.report_interval_ms = config.report_interval_ms;
  options.demand_device_bytes = config.device_budget;
  options.min_device_bytes = config.min_device_budget;
  options.demand_host_bytes = config.host_budget;
  options.log_level = static_cast<int>(config.log_level);
  options.staging_slots = config.staging_slots;
  const char* error = "unknown error";
  ControlPlane* plane = create(&options, &error);
  if (plane == nullptr) {
    MEMSHIM_LOG(kWarn, "daemon link refused to start (%s); running standalone", error);
  }
  return plane;
}

}  // namespace memvirt::shim::hooks

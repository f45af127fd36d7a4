// Layered configuration for memvirtd: command-line flags > environment > config file.
//
// Config file format (version 1), e.g. /etc/memvirt/memvirtd.conf:
//   # comment
//   config_version = 1
//   socket = /run/memvirt/memvirtd.sock
//   metrics-listen = 127.0.0.1:9464
// Keys are flag names (dashes and underscores are equivalent). `config_version` is required
// and must be 1. The environment variable for flag `foo_bar` is MEMVIRTD_FOO_BAR.
//
// Thread safety: pure functions over the given callbacks; call during startup only.
#ifndef MEMVIRT_DAEMON_SERVER_CONFIG_H_
#define MEMVIRT_DAEMON_SERVER_CONFIG_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/node_state.h"

namespace memvirt::daemon {

inline constexpr int kConfigVersion = 1;

// Returns key -> value (keys normalized to underscores, `config_version` removed).
absl::StatusOr<std::map<std::string, std::string>> ParseConfigText(const std::string& text);
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(const std::string& path);

struct FlagAccess {
  std::vector<std::string> names;  // flags the layers may set
  std::function<bool(const std::string&)> set_on_command_line;
  std::function<absl::Status(const std::string&, const std::string&)> set;
  std::function<std::optional<std::string>(const std::string&)> getenv;
};

// Applies file values, then environment values, to every flag in `access.names` that was not
// given on the command line. INVALID_ARGUMENT for a file key that names no such flag.
absl::Status ApplyConfigLayers(const std::map<std::string, std::string>& file_values,
                               const FlagAccess& access);

// "MEMVIRTD_" + upper-case flag name.
std::string EnvNameOf(const std::string& flag);

// Parses --gpu: "UUID:SIZE[,UUID:SIZE...]" (SIZE as in daemon/core/size_parse.h); "" = none.
absl::StatusOr<std::vector<StaticGpu>> ParseGpuList(const std::string& text);

// A group by name or number, for --socket_group/--admin_group; "" = none.
absl::StatusOr<std::optional<gid_t>> ResolveGroup(const std::string& name_or_gid);

// Rewrites "--flag-name[=v]" to "--flag_name[=v]" in place (gflags wants underscores).
void NormalizeFlagDashes(int argc, char** argv);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_CONFIG_H_

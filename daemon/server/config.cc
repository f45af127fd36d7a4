#include "daemon/server/config.h"

#include <grp.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/core/size_parse.h"

namespace memvirt::daemon {

absl::StatusOr<std::map<std::string, std::string>> ParseConfigText(const std::string& text) {
  std::map<std::string, std::string> values;
  std::optional<std::string> version;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l[0] == '#') continue;
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("config line ", lineno, ": expected key = value"));
    }
    std::string key =
        absl::StrReplaceAll(absl::StripAsciiWhitespace(l.substr(0, eq)), {{"-", "_"}});
    std::string value(absl::StripAsciiWhitespace(l.substr(eq + 1)));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("config line ", lineno, ": empty key"));
    }
    if (key == "config_version") {
      version = value;
      continue;
    }
    if (!values.emplace(key, value).second) {
      return absl::InvalidArgumentError(absl::StrCat("config line ", lineno, ": duplicate ", key));
    }
  }
  if (!version.has_value()) return absl::InvalidArgumentError("config: config_version missing");
  if (*version != absl::StrCat(kConfigVersion)) {
    return absl::InvalidArgumentError(absl::StrCat("config: unsupported config_version ", *version,
                                                   " (want ", kConfigVersion, ")"));
  }
  return values;
}

absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::map<std::string, std::string>> v = ParseConfigText(ss.str());
  if (!v.ok())
    return absl::Status(v.status().code(), absl::StrCat(path, ": ", v.status().message()));
  return v;
}

std::string EnvNameOf(const std::string& flag) {
  return absl::StrCat("MEMVIRTD_", absl::AsciiStrToUpper(flag));
}

absl::Status ApplyConfigLayers(const std::map<std::string, std::string>& file_values,
                               const FlagAccess& access) {
  for (const auto& [key, value] : file_values) {
    if (std::find(access.names.begin(), access.names.end(), key) == access.names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("config: unknown key ", key));
    }
  }
  for (const std::string& name : access.names) {
    if (access.set_on_command_line(name)) continue;
    std::optional<std::string> value;
    if (auto it = file_values.find(name); it != file_values.end()) value = it->second;
    if (std::optional<std::string> env = access.getenv(EnvNameOf(name))) value = env;
    if (!value.has_value()) continue;
    if (absl::Status s = access.set(name, *value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StaticGpu>> ParseGpuList(const std::string& text) {
  std::vector<StaticGpu> gpus;
  if (text.empty()) return gpus;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const size_t colon = item.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--gpu: expected UUID:SIZE, got '", item, "'"));
    }
    absl::StatusOr<uint64_t> bytes = ParseBytes(item.substr(colon + 1));
    if (!bytes.ok())
      return absl::InvalidArgumentError(absl::StrCat("--gpu: ", bytes.status().message()));
    gpus.push_back({std::string(item.substr(0, colon)), *bytes});
  }
  return gpus;
}

absl::StatusOr<std::optional<gid_t>> ResolveGroup(const std::string& name_or_gid) {
  if (name_or_gid.empty()) return std::optional<gid_t>();
  uint32_t gid = 0;
  if (absl::SimpleAtoi(name_or_gid, &gid)) return std::optional<gid_t>(gid);
  group grp;
  group* found = nullptr;
  char buf[4096];
  if (getgrnam_r(name_or_gid.c_str(), &grp, buf, sizeof(buf), &found) != 0 || found == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown group ", name_or_gid));
  }
  return std::optional<gid_t>(found->gr_gid);
}

void NormalizeFlagDashes(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;  // "--" ends the flags
    for (char* p = a + 2; *p != '\0' && *p != '='; ++p) {
      if (*p == '-') *p = '_';
    }
  }
}

}  // namespace memvirt::daemon

#include "daemon/server/config.h"

#include <set>

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

TEST(ConfigTest, ParsesVersionedFile) {
  auto v = ParseConfigText(
      "# memvirtd\nconfig_version = 1\nsocket = /tmp/x.sock\n"
      "metrics-listen = \"127.0.0.1:9464\"\n\n");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->at("socket"), "/tmp/x.sock");
  EXPECT_EQ(v->at("metrics_listen"), "127.0.0.1:9464");
  EXPECT_EQ(v->count("config_version"), 0u);
}

TEST(ConfigTest, RejectsBadFiles) {
  EXPECT_FALSE(ParseConfigText("socket = /x\n").ok());                       // no version
  EXPECT_FALSE(ParseConfigText("config_version = 2\n").ok());                // future version
  EXPECT_FALSE(ParseConfigText("config_version = 1\nsocket\n").ok());        // no '='
  EXPECT_FALSE(ParseConfigText("config_version = 1\na = 1\na = 2\n").ok());  // duplicate
  EXPECT_FALSE(ReadConfigFile("/nonexistent/memvirtd.conf").ok());
}

struct FakeFlags {
  std::map<std::string, std::string> values;
  std::set<std::string> explicit_flags;
  std::map<std::string, std::string> env;
  FlagAccess Access() {
    return {
        .names = {"socket", "reserve", "gpu"},
        .set_on_command_line = [this](const std::string& n) { return explicit_flags.count(n) > 0; },
        .set =
            [this](const std::string& n, const std::string& v) {
              values[n] = v;
              return absl::OkStatus();
            },
        .getenv = [this](const std::string& n) -> std::optional<std::string> {
          auto it = env.find(n);
          if (it == env.end()) return std::nullopt;
          return it->second;
        }};
  }
};

TEST(ConfigTest, FlagsBeatEnvBeatsFile) {
  FakeFlags f;
  f.values = {{"socket", "cli"}, {"reserve", "default"}, {"gpu", "default"}};
  f.explicit_flags = {"socket"};
  f.env = {{"MEMVIRTD_SOCKET", "env"}, {"MEMVIRTD_RESERVE", "env"}};
  ASSERT_TRUE(
      ApplyConfigLayers({{"socket", "file"}, {"reserve", "file"}, {"gpu", "file"}}, f.Access())
          .ok());
  EXPECT_EQ(f.values["socket"], "cli");
  EXPECT_EQ(f.values["reserve"], "env");
  EXPECT_EQ(f.values["gpu"], "file");
}

TEST(ConfigTest, UnknownFileKeyIsAnError) {
  FakeFlags f;
  EXPECT_EQ(ApplyConfigLayers({{"sockett", "x"}}, f.Access()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, NormalizesDashesInFlagNamesOnly) {
  char a0[] = "memvirtd", a1[] = "--metrics-listen=127.0.0.1:0", a2[] = "--gpu=GPU-a-b:1G",
       a3[] = "--", a4[] = "--not-a-flag";
  char* argv[] = {a0, a1, a2, a3, a4};
  NormalizeFlagDashes(5, argv);
  EXPECT_STREQ(argv[1], "--metrics_listen=127.0.0.1:0");
  EXPECT_STREQ(argv[2], "--gpu=GPU-a-b:1G");
  EXPECT_STREQ(argv[4], "--not-a-flag");
  EXPECT_EQ(EnvNameOf("metrics_listen"), "MEMVIRTD_METRICS_LISTEN");
}

TEST(ConfigTest, ParsesGpuList) {
  auto g = ParseGpuList("GPU-aa:80G,GPU-bb-cc:1024");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 2u);
  EXPECT_EQ((*g)[0].gpu_uuid, "GPU-aa");
  EXPECT_EQ((*g)[0].device_memory_bytes, uint64_t{80} << 30);
  EXPECT_EQ((*g)[1].gpu_uuid, "GPU-bb-cc");
  EXPECT_EQ((*g)[1].device_memory_bytes, 1024u);
  EXPECT_TRUE(ParseGpuList("")->empty());
  EXPECT_FALSE(ParseGpuList("GPU-aa").ok());
  EXPECT_FALSE(ParseGpuList("GPU-aa:lots").ok());
}

TEST(ConfigTest, ResolvesGroups) {
  EXPECT_EQ(**ResolveGroup("0"), 0u);
  EXPECT_EQ(**ResolveGroup("root"), 0u);
  EXPECT_FALSE(ResolveGroup("").value().has_value());
  EXPECT_FALSE(ResolveGroup("no-such-group-memvirt").ok());
}

}  // namespace
}  // namespace memvirt::daemon

#include "shim/core/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace memvirt::shim {
namespace {

std::map<std::string, std::string>* g_env = nullptr;
const char* FakeGetenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

TEST(ParseBytesTest, AcceptsSuffixes) {
  uint64_t v = 0;
  ASSERT_TRUE(ParseBytes("1048576", &v));
  EXPECT_EQ(v, 1048576u);
  ASSERT_TRUE(ParseBytes("512M", &v));
  EXPECT_EQ(v, 512ull << 20);
  ASSERT_TRUE(ParseBytes("3g", &v));
  EXPECT_EQ(v, 3ull << 30);
  ASSERT_TRUE(ParseBytes("1.5GiB", &v));
  EXPECT_EQ(v, 3ull << 29);
  ASSERT_TRUE(ParseBytes("64K", &v));
  EXPECT_EQ(v, 64ull << 10);
  EXPECT_FALSE(ParseBytes("", &v));
  EXPECT_FALSE(ParseBytes("abc", &v));
  EXPECT_FALSE(ParseBytes("12Q", &v));
  EXPECT_FALSE(ParseBytes("-1", &v));
}

TEST(ShimConfigTest, ReadsEnvironment) {
  std::map<std::string, std::string> env = {{"MEMSHIM_DISABLE", "1"},
                                            {"MEMSHIM_DEVICE_BUDGET", "2G"},
                                            {"MEMSHIM_HOST_BUDGET", "8G"},
                                            {"MEMSHIM_LOG", "debug"},
                                            {"MEMSHIM_POLICY", "lifetime"}};
  g_env = &env;
  ShimConfig c = ParseShimConfig(&FakeGetenv);
  EXPECT_TRUE(c.disabled);
  EXPECT_EQ(c.device_budget, 2ull << 30);
  EXPECT_EQ(c.host_budget, 8ull << 30);
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.policy, "lifetime");
  env = {{"MEMSHIM_DISABLE", "0"}, {"MEMSHIM_DEVICE_BUDGET", "junk"}};
  c = ParseShimConfig(&FakeGetenv);
  EXPECT_FALSE(c.disabled);
  EXPECT_EQ(c.device_budget, 0u);
  EXPECT_EQ(c.policy, "lifetime");  // the default
  EXPECT_EQ(c.log_level, LogLevel::kWarn);
  g_env = nullptr;
}

TEST(ShimConfigTest, ReadsHiddenReach) {
  std::map<std::string, std::string> env = {{"MEMSHIM_HIDDEN_REACH", "all"}};
  g_env = &env;
  EXPECT_TRUE(ParseShimConfig(&FakeGetenv).hidden_reach_all);
  env = {{"MEMSHIM_HIDDEN_REACH", "recognized"}};
  EXPECT_FALSE(ParseShimConfig(&FakeGetenv).hidden_reach_all);
  env = {{"MEMSHIM_HIDDEN_REACH", "everything"}};  // unknown: the default
  EXPECT_FALSE(ParseShimConfig(&FakeGetenv).hidden_reach_all);
  env = {};
  EXPECT_FALSE(ParseShimConfig(&FakeGetenv).hidden_reach_all);
  g_env = nullptr;
}

TEST(ShimConfigTest, ReadsDaemonLinkSettingsAndRejectsOutOfRange) {
  std::map<std::string, std::string> env = {{"MEMSHIM_DAEMON", "off"},
                                            {"MEMSHIM_DAEMON_PLUGIN", "/opt/x.so"},
                                            {"MEMSHIM_DAEMON_TIMEOUT_MS", "500"},
                                            {"MEMSHIM_REPORT_INTERVAL_MS", "50"},
                                            {"MEMSHIM_MIN_DEVICE_BUDGET", "64M"},
                                            {"MEMSHIM_STAGING_SLOTS", "0"}};
  g_env = &env;
  ShimConfig c = ParseShimConfig(&FakeGetenv);
  EXPECT_TRUE(c.daemon_off);
  EXPECT_EQ(c.daemon_plugin, "/opt/x.so");
  EXPECT_EQ(c.daemon_timeout_ms, 500u);
  EXPECT_EQ(c.report_interval_ms, 50u);
  EXPECT_EQ(c.min_device_budget, 64ull << 20);
  EXPECT_EQ(c.staging_slots, 0u);
  env = {{"MEMSHIM_DAEMON", "auto"},
         {"MEMSHIM_STAGING_SLOTS", "1000"},
         {"MEMSHIM_DAEMON_TIMEOUT_MS", "-3"},
         {"MEMSHIM_REPORT_INTERVAL_MS", "1"},
         {"MEMSHIM_MIN_DEVICE_BUDGET", "lots"}};
  c = ParseShimConfig(&FakeGetenv);
  EXPECT_FALSE(c.daemon_off);
  EXPECT_EQ(c.daemon_timeout_ms, 2000u);  // defaults kept
  EXPECT_EQ(c.report_interval_ms, 200u);
  EXPECT_EQ(c.min_device_budget, 16ull << 20);
  EXPECT_EQ(c.staging_slots, 8u);
  g_env = nullptr;
}

TEST(ShimConfigTest, ReadsEventSettingsAndRejectsOutOfRange) {
  std::map<std::string, std::string> env = {{"MEMSHIM_EVENT_BATCH", "8"},
                                            {"MEMSHIM_EVENT_PACE", "0"}};
  g_env = &env;
  ShimConfig c = ParseShimConfig(&FakeGetenv);
  EXPECT_EQ(c.event_batch, 8u);
  EXPECT_EQ(c.event_pace, 0u);  // pacing off
  env = {{"MEMSHIM_EVENT_BATCH", "0"}, {"MEMSHIM_EVENT_PACE", "-1"}};
  c = ParseShimConfig(&FakeGetenv);
  EXPECT_EQ(c.event_batch, 32u);  // defaults kept
  EXPECT_EQ(c.event_pace, 512u);
  env = {{"MEMSHIM_EVENT_PACE", "1000000"}};
  EXPECT_EQ(ParseShimConfig(&FakeGetenv).event_pace, 512u);
  g_env = nullptr;
}

}  // namespace
}  // namespace memvirt::shim

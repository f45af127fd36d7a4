#include "config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace memsim {
namespace {

TEST(SimParseByteSize, AcceptsPlainNumbersAndBinarySuffixes) {
  EXPECT_EQ(ParseByteSize("0"), 0u);
  EXPECT_EQ(ParseByteSize("4096"), 4096u);
  EXPECT_EQ(ParseByteSize("64K"), 64u << 10);
  EXPECT_EQ(ParseByteSize("512m"), 512ull << 20);
  EXPECT_EQ(ParseByteSize("2G"), 2ull << 30);
  EXPECT_EQ(ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(ParseByteSize("3GB"), 3ull << 30);
  EXPECT_EQ(ParseByteSize("1T"), 1ull << 40);
}

TEST(SimParseByteSize, RejectsMalformedAndOverflowingInput) {
  EXPECT_FALSE(ParseByteSize(""));
  EXPECT_FALSE(ParseByteSize("G"));
  EXPECT_FALSE(ParseByteSize("12X"));
  EXPECT_FALSE(ParseByteSize("1.5G"));
  EXPECT_FALSE(ParseByteSize("-1"));
  EXPECT_FALSE(ParseByteSize("99999999999999999999"));
  EXPECT_FALSE(ParseByteSize("17179869184G"));  // 2^34 GiB overflows 64 bits
}

TEST(SimParseNonNegativeDouble, ParsesRatesAndRejectsGarbage) {
  EXPECT_EQ(ParseNonNegativeDouble("2"), 2.0);
  EXPECT_EQ(ParseNonNegativeDouble("12.5"), 12.5);
  EXPECT_EQ(ParseNonNegativeDouble("0"), 0.0);
  EXPECT_FALSE(ParseNonNegativeDouble("-3"));
  EXPECT_FALSE(ParseNonNegativeDouble("fast"));
  EXPECT_FALSE(ParseNonNegativeDouble("2x"));
}

TEST(SimLoadConfigFromEnv, ReadsEveryVariableAndKeepsDefaultsOnGarbage) {
  setenv("MEMSIM_DEVICE_MEMORY", "256M", 1);
  setenv("MEMSIM_DEVICE_COUNT", "3", 1);
  setenv("MEMSIM_H2D_GBPS", "12", 1);
  setenv("MEMSIM_D2H_GBPS", "bogus", 1);
  setenv("MEMSIM_NODE", "unit-node", 1);
  setenv("MEMSIM_MAP_US", "250", 1);
  setenv("MEMSIM_HOST_NUMA", "0", 1);
  Config c = LoadConfigFromEnv();
  EXPECT_EQ(c.device_memory, 256ull << 20);
  EXPECT_EQ(c.device_count, 3);
  EXPECT_EQ(c.h2d_gbps, 12.0);
  EXPECT_EQ(c.d2h_gbps, 0.0);
  EXPECT_EQ(c.node, "unit-node");
  EXPECT_EQ(c.map_us, 250.0);
  EXPECT_FALSE(c.host_numa);
  setenv("MEMSIM_MAP_US", "-1", 1);
  setenv("MEMSIM_HOST_NUMA", "2", 1);
  Config bad = LoadConfigFromEnv();
  EXPECT_EQ(bad.map_us, 0.0);
  EXPECT_TRUE(bad.host_numa);
  for (const char* v : {"MEMSIM_DEVICE_MEMORY", "MEMSIM_DEVICE_COUNT", "MEMSIM_H2D_GBPS",
                        "MEMSIM_D2H_GBPS", "MEMSIM_NODE", "MEMSIM_MAP_US", "MEMSIM_HOST_NUMA"}) {
    unsetenv(v);
  }
  Config d = LoadConfigFromEnv();
  EXPECT_EQ(d.device_memory, 1ull << 30);
  EXPECT_EQ(d.device_count, 1);
  EXPECT_TRUE(d.node.empty());
  EXPECT_EQ(d.map_us, 0.0);
  EXPECT_TRUE(d.host_numa);
}

}  // namespace
}  // namespace memsim

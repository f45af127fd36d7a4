#include "tools/cli_values.h"

#include <gtest/gtest.h>

namespace memvirt::policy {
namespace {

TEST(CliValuesTest, ByteSuffixes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("2M"), 2u << 20);
  EXPECT_EQ(*ParseByteSize("2Mi"), 2u << 20);
  EXPECT_EQ(*ParseByteSize("40Gi"), 40ull << 30);
  EXPECT_EQ(*ParseByteSize("40G"), 40ull << 30);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000u);
  EXPECT_EQ(*ParseByteSize("4K"), 4096u);
  EXPECT_EQ(*ParseByteSize("4KB"), 4000u);
  EXPECT_EQ(*ParseByteSize("1T"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("12B"), 12u);
}

TEST(CliValuesTest, RejectsBadSizes) {
  for (const char* bad : {"", "M", "-1", "1.5", "2X", "1e9", "0.3K", "2 M", "2m", "1..2G"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

TEST(CliValuesTest, Numbers) {
  EXPECT_DOUBLE_EQ(*ParsePositiveNumber("15.754"), 15.754);
  EXPECT_FALSE(ParsePositiveNumber("0").ok());
  EXPECT_FALSE(ParsePositiveNumber("abc").ok());
  EXPECT_DOUBLE_EQ(*ParseNonNegativeNumber("0"), 0);
  EXPECT_DOUBLE_EQ(*ParseNonNegativeNumber("2.5"), 2.5);
  EXPECT_FALSE(ParseNonNegativeNumber("-1").ok());
  EXPECT_FALSE(ParseNonNegativeNumber("x").ok());
  EXPECT_EQ(*ParsePositiveInt("3"), 3);
  EXPECT_FALSE(ParsePositiveInt("0").ok());
  EXPECT_FALSE(ParsePositiveInt("2.5").ok());
}

}  // namespace
}  // namespace memvirt::policy

#include "daemon/core/size_parse.h"

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

TEST(SizeParseTest, Suffixes) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("2K"), 2048u);
  EXPECT_EQ(*ParseBytes("512M"), 512u << 20);
  EXPECT_EQ(*ParseBytes("16G"), uint64_t{16} << 30);
  EXPECT_EQ(*ParseBytes("16GiB"), uint64_t{16} << 30);
  EXPECT_EQ(*ParseBytes("1.5g"), uint64_t{3} << 29);
  EXPECT_EQ(*ParseBytes(" 3Mi "), 3u << 20);
}

TEST(SizeParseTest, Rejects) {
  for (const char* bad : {"", "-1", "G", "12X", "1.2.3", "99999999999999999999", "17179869184T"}) {
    EXPECT_FALSE(ParseBytes(bad).ok()) << bad;
  }
}

TEST(SizeParseTest, FormatRoundTripsMagnitude) {
  EXPECT_EQ(FormatBytes(0), "0B");
  EXPECT_EQ(FormatBytes(1536ull << 20), "1.5GiB");
  EXPECT_EQ(FormatBytes(512ull << 20), "512MiB");
}

}  // namespace
}  // namespace memvirt::daemon

#include "md2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace memsim {
namespace {

std::string Hex(const Md2Digest& d) {
  std::string s;
  char buf[3];
  for (uint8_t b : d) {
    std::snprintf(buf, sizeof(buf), "%02x", b);
    s += buf;
  }
  return s;
}

std::string Md2Hex(const std::string& message) {
  Md2 md;
  md.Update(message.data(), message.size());
  return Hex(md.Finish());
}

// The test suite of RFC 1319, appendix A.5.
TEST(Md2, Rfc1319TestSuite) {
  EXPECT_EQ(Md2Hex(""), "8350e5a3e24c153df2275c9f80692773");
  EXPECT_EQ(Md2Hex("a"), "32ec01ec4a6dac72c0ab96fb34c0b5d1");
  EXPECT_EQ(Md2Hex("abc"), "da853b0d3f88d99b30283a69e6ded6bb");
  EXPECT_EQ(Md2Hex("message digest"), "ab4f496bfb2a530b219ff33031fe06b0");
  EXPECT_EQ(Md2Hex("abcdefghijklmnopqrstuvwxyz"), "4e8ddff3650292ab5a4108c3aa47940b");
  EXPECT_EQ(Md2Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "da33def2a42df13975352846c30338cd");
  std::string digits;
  for (int i = 0; i < 8; ++i) digits += "1234567890";
  EXPECT_EQ(Md2Hex(digits), "d5976f79d83d3a0dc9806c3c66f3efd8");
}

TEST(Md2, UpdateInPiecesEqualsOneUpdate) {
  const std::string text = "the quick brown fox jumps over the lazy dog, twice over";
  Md2 pieces;
  for (size_t i = 0; i < text.size(); i += 5) {
    pieces.Update(text.data() + i, std::min<size_t>(5, text.size() - i));
  }
  EXPECT_EQ(Hex(pieces.Finish()), Md2Hex(text));
}

TEST(Md2, HmacIsTheTwoNestedDigests) {
  std::array<uint8_t, 16> key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(0x10 + 7 * i);
  const std::string message = "integrity";
  std::string inner_input, outer_input;
  for (uint8_t k : key) inner_input += static_cast<char>(k ^ 0x36);
  inner_input += message;
  Md2 inner;
  inner.Update(inner_input.data(), inner_input.size());
  const Md2Digest inner_digest = inner.Finish();
  for (uint8_t k : key) outer_input += static_cast<char>(k ^ 0x5c);
  outer_input.append(reinterpret_cast<const char*>(inner_digest.data()), inner_digest.size());
  EXPECT_EQ(Hex(HmacMd2(key, message.data(), message.size())), Md2Hex(outer_input));
  EXPECT_NE(Hex(HmacMd2(key, "integritY", 9)), Md2Hex(outer_input));
}

}  // namespace
}  // namespace memsim

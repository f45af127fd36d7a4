#include "json_line.h"

#include <gtest/gtest.h>

namespace memvirt::trace {
namespace {

using Type = JsonValue::Type;

TEST(JsonLineTest, ParsesFlatObject) {
  auto v = ParseJson(
      R"( {"t":"kernel","id":7,"us":1.5e2,"reads":[1,2],"ok":true,"n":null,"s":"a\"b\u0041"} )");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->type, Type::kObject);
  EXPECT_EQ(v->object.at("t").string, "kernel");
  EXPECT_EQ(v->object.at("id").integer, 7u);
  EXPECT_DOUBLE_EQ(v->object.at("us").number, 150.0);
  EXPECT_FALSE(v->object.at("us").integer.has_value());
  ASSERT_EQ(v->object.at("reads").array.size(), 2u);
  EXPECT_EQ(v->object.at("reads").array[1].integer, 2u);
  EXPECT_TRUE(v->object.at("ok").boolean);
  EXPECT_EQ(v->object.at("n").type, Type::kNull);
  EXPECT_EQ(v->object.at("s").string, "a\"bA");
}

TEST(JsonLineTest, LargeIntegersStayExact) {
  auto v = ParseJson("18446744073709551615");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->integer, 18446744073709551615ull);
  auto neg = ParseJson("-3");
  ASSERT_TRUE(neg.ok());
  EXPECT_FALSE(neg->integer.has_value());
  EXPECT_DOUBLE_EQ(neg->number, -3);
}

TEST(JsonLineTest, RejectsMalformedInput) {
  for (const char* bad : {"", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "[1,2", "[1 2]", "01",
                          "1.", "-", "1e", "tru", "\"abc", "\"\\x\"", "{\"a\":1} x",
                          "{\"a\":1,\"a\":2}", "{a:1}", "\"\\u12G4\"", "nul"}) {
    auto v = ParseJson(bad);
    EXPECT_FALSE(v.ok()) << "accepted: " << bad;
    if (!v.ok()) {
      EXPECT_NE(std::string(v.status().message()).find("offset"), std::string::npos) << bad;
    }
  }
}

TEST(JsonLineTest, RejectsExcessiveNesting) {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
  std::string ok(20, '[');
  ok += std::string(20, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
}

}  // namespace
}  // namespace memvirt::trace

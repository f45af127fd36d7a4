#include "daemon/memctl/status_format.h"

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace memvirt::memctl {
namespace {

v1::StatusResponse Sample() {
  v1::StatusResponse s;
  s.set_daemon_version("0.1.0");
  s.set_protocol_version(1);
  s.set_uptime_seconds(42);
  auto* g = s.add_gpus();
  g->set_gpu_uuid("GPU-00000000-0000-0000-0000-000000000001");
  g->set_device_memory_bytes(80ull << 30);
  g->set_reserve_bytes(512ull << 20);
  g->set_budget_sum_bytes(40ull << 30);
  g->set_clients(1);
  auto* c = s.add_clients();
  c->set_pid(4242);
  c->set_uid(1000);
  c->set_process_name("py\"thon\n");
  auto* cg = c->add_gpus();
  cg->set_gpu_uuid(g->gpu_uuid());
  cg->set_budget_bytes(40ull << 30);
  cg->set_shrink_overdue(true);
  cg->mutable_usage()->set_resident_bytes((40ull << 30) - 1);
  cg->set_page_in_bytes_per_second(2.0 * (1 << 20));
  return s;
}

TEST(StatusFormatTest, JsonIsParseableWithIntegerBytesAndVersion) {
  const std::string json = FormatStatusJson(Sample());
  google::protobuf::Struct parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok()) << json;
  EXPECT_EQ(parsed.fields().at("version").number_value(), kStatusJsonVersion);
  const auto& proc = parsed.fields().at("processes").list_value().values(0).struct_value();
  EXPECT_EQ(proc.fields().at("pid").number_value(), 4242);
  EXPECT_EQ(proc.fields().at("name").string_value(), "py\"thon\n");
  const auto& g = proc.fields().at("gpus").list_value().values(0).struct_value();
  EXPECT_EQ(g.fields().at("budget_bytes").number_value(), static_cast<double>(40ull << 30));
  EXPECT_TRUE(g.fields().at("shrink_overdue").bool_value());
  EXPECT_NE(json.find("\"resident_bytes\":42949672959"), std::string::npos) << "exact integer";
}

TEST(StatusFormatTest, TableHasHeadersUnlessAskedNot) {
  const std::string t = FormatStatusTable(Sample(), true);
  EXPECT_NE(t.find("RESIDENT"), std::string::npos);
  EXPECT_NE(t.find("4242"), std::string::npos);
  EXPECT_NE(t.find("40.0GiB!"), std::string::npos) << "overdue shrink is marked";
  EXPECT_NE(t.find("2.0MiB/s"), std::string::npos);
  const std::string bare = FormatStatusTable(Sample(), false);
  EXPECT_EQ(bare.find("RESIDENT"), std::string::npos);
  EXPECT_EQ(bare.find("memvirtd"), std::string::npos);
  EXPECT_NE(bare.find("4242"), std::string::npos);
}

TEST(StatusFormatTest, JsonQuoteEscapes) {
  EXPECT_EQ(JsonQuote("a\"b\\c\x01"), "\"a\\\"b\\\\c\\u0001\"");
}

}  // namespace
}  // namespace memvirt::memctl

#include "memvirt/trace/memtrace.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>

namespace memvirt::trace {
namespace {

constexpr char kGood[] =
    R"({"format":"memtrace-v1","model":"Tiny","batch":4,"iterations":1,"extra":{"x":[1]}}
{"t":"tensor","id":0,"bytes":4096,"kind":"weight","persistent":true}
{"t":"tensor","id":1,"bytes":100,"kind":"activation","persistent":false,"role":"a"}
{"t":"kernel","id":0,"name":"fwd","us":12.5,"reads":[0],"writes":[1]}

{"t":"kernel","id":1,"name":"bwd","us":3,"reads":[0,1],"writes":[]}
{"t":"free","tensor":1,"after_kernel":1}
)";

TEST(MemtraceTest, ParsesAllRecordTypes) {
  auto t = ParseTrace(kGood);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->model, "Tiny");
  EXPECT_EQ(t->batch, 4);
  ASSERT_EQ(t->tensors.size(), 2u);
  EXPECT_TRUE(t->tensors[0].persistent);
  EXPECT_EQ(t->tensors[1].kind, "activation");
  ASSERT_EQ(t->kernels.size(), 2u);
  EXPECT_DOUBLE_EQ(t->kernels[0].us, 12.5);
  EXPECT_EQ(t->kernels[1].reads, (std::vector<uint64_t>{0, 1}));
  ASSERT_EQ(t->frees.size(), 1u);
  EXPECT_EQ(t->frees[0].after_kernel, 1u);
}

// Replaces line `n` (1-based) of kGood.
std::string WithLine(int n, const std::string& line) {
  std::istringstream in(kGood);
  std::string out, l;
  for (int i = 1; std::getline(in, l); ++i) out += (i == n ? line : l) + "\n";
  return out;
}

void ExpectError(const std::string& text, const std::string& prefix, const std::string& what) {
  auto t = ParseTrace(text);
  ASSERT_FALSE(t.ok());
  const std::string msg(t.status().message());
  EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(MemtraceTest, ReportsMalformedLinesWithLineNumbers) {
  ExpectError(WithLine(3, R"({"t":"tensor","id":1,"bytes":100,)"), "line 3:", "JSON");
  ExpectError(WithLine(1, R"({"format":"memtrace-v2"})"), "line 1:", "memtrace-v1");
  ExpectError(WithLine(2, R"({"t":"tensor","id":0,"bytes":0})"), "line 2:", "bytes");
  ExpectError(WithLine(2, R"({"t":"tensor","id":0,"bytes":-5})"), "line 2:", "bytes");
  ExpectError(WithLine(3, R"({"t":"tensor","id":0,"bytes":5})"), "line 3:", "duplicate tensor");
  ExpectError(WithLine(4, R"({"t":"kernel","id":0,"us":1,"reads":[7]})"),
              "line 4:", "unknown tensor id 7");
  ExpectError(WithLine(4, R"({"t":"kernel","id":0,"reads":[0]})"), "line 4:", "us");
  ExpectError(WithLine(4, R"({"t":"kernel","id":0,"us":1,"reads":"0"})"), "line 4:", "array");
  ExpectError(WithLine(6, R"({"t":"kernel","id":0,"us":1})"), "line 6:", "duplicate kernel");
  ExpectError(WithLine(7, R"({"t":"free","tensor":1,"after_kernel":9})"),
              "line 7:", "unknown kernel id 9");
  ExpectError(WithLine(7, R"({"t":"bogus"})"), "line 7:", "unknown record type");
  ExpectError(WithLine(7, R"([1,2])"), "line 7:", "object");
  ExpectError(WithLine(2, R"({"t":"tensor","id":0,"bytes":5,"persistent":"yes"})"),
              "line 2:", "persistent");
  ExpectError("", "line 1:", "empty");
}

// Found by tests/fuzz/memtrace_fuzzer: a batch beyond int64_t was converted (undefined).
TEST(MemtraceTest, RejectsBatchOutOfRange) {
  ExpectError(WithLine(1, R"({"format":"memtrace-v1","batch":27777777777777777777777})"),
              "line 1:", "batch");
  ExpectError(WithLine(1, R"({"format":"memtrace-v1","batch":-1e300})"), "line 1:", "batch");
  auto t = ParseTrace(WithLine(1, R"({"format":"memtrace-v1","batch":-9.2e18})"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->batch, -9200000000000000000);
}

// Found by tests/fuzz/memtrace_fuzzer: iterations of 2^64-1 became -1 in int64_t, which
// FormatTrace wrote and ParseTrace then refused.
TEST(MemtraceTest, RejectsIterationsBeyondInt64AndRoundTripsTheLargest) {
  ExpectError(WithLine(1, R"({"format":"memtrace-v1","iterations":18446744073709551615})"),
              "line 1:", "iterations");
  ExpectError(WithLine(1, R"({"format":"memtrace-v1","iterations":9223372036854775808})"),
              "line 1:", "iterations");
  auto t = ParseTrace(WithLine(1, R"({"format":"memtrace-v1","iterations":9223372036854775807})"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->iterations, std::numeric_limits<int64_t>::max());
  auto again = ParseTrace(FormatTrace(*t));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->iterations, t->iterations);
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/memtrace_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(MemtraceTest, RoundTripsThroughPlainAndGzipFiles) {
  auto t = ParseTrace(kGood);
  ASSERT_TRUE(t.ok());
  for (const std::string name : {"t.jsonl", "t.jsonl.gz"}) {
    const std::string path = TempPath(name);
    ASSERT_TRUE(WriteTrace(*t, path).ok());
    auto back = ReadTrace(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(FormatTrace(*back), FormatTrace(*t));
    EXPECT_EQ(back->kernels[0].writes, (std::vector<uint64_t>{1}));
    // The .gz file really is compressed (gzip magic).
    std::ifstream f(path, std::ios::binary);
    unsigned char magic[2] = {0, 0};
    f.read(reinterpret_cast<char*>(magic), 2);
    EXPECT_EQ(name.ends_with(".gz"), magic[0] == 0x1f && magic[1] == 0x8b);
    std::remove(path.c_str());
  }
}

TEST(MemtraceTest, TruncatedGzipIsAnError) {
  auto t = ParseTrace(kGood);
  ASSERT_TRUE(t.ok());
  const std::string path = TempPath("trunc.jsonl.gz");
  ASSERT_TRUE(WriteTrace(*t, path).ok());
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(bytes.size(), 20u);
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 8));  // drop the trailer
  }
  EXPECT_FALSE(ReadTrace(path).ok());
  std::remove(path.c_str());
}

TEST(MemtraceTest, ReadErrorsNameTheFile) {
  auto missing = ReadTrace(TempPath("does_not_exist.jsonl"));
  EXPECT_FALSE(missing.ok());
  const std::string path = TempPath("bad.jsonl");
  {
    std::ofstream f(path);
    f << "{\"format\":\"memtrace-v1\"}\n{\"t\":\"tensor\"\n";
  }
  auto bad = ReadTrace(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find(path + ": line 2:"), std::string::npos)
      << bad.status();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace memvirt::trace

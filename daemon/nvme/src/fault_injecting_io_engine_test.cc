#include "memvirt/nvme/fault_injecting_io_engine.h"

#include <gtest/gtest.h>

#include "memvirt/nvme/memory_io_engine.h"
#include "test_util.h"

namespace memvirt::nvme {
namespace {

using testing::AlignedBuffer;

class FaultInjectingIoEngineTest : public ::testing::Test {
 protected:
  MemoryIoEngine memory_{{1 << 20, 1 << 20}};
  FaultInjectingIoEngine faulty_{&memory_};
};

TEST_F(FaultInjectingIoEngineTest, ForwardsWhenNoFaultIsSet) {
  AlignedBuffer out(8192), in(8192);
  testing::FillRandom(out.span(), 5);
  ASSERT_TRUE(faulty_.WriteSync(0, 4096, out.data(), out.size()).ok());
  ASSERT_TRUE(faulty_.ReadSync(0, 4096, in.data(), in.size()).ok());
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
  EXPECT_EQ(faulty_.file_count(), 2);
  EXPECT_EQ(faulty_.outstanding(), 0u);
}

TEST_F(FaultInjectingIoEngineTest, NoSpaceAfterBudgetAndNothingWritten) {
  AlignedBuffer buf(8192);
  testing::FillRandom(buf.span(), 6);
  faulty_.SetNoSpaceAfter(12288);
  EXPECT_TRUE(faulty_.WriteSync(0, 0, buf.data(), 8192).ok());
  const absl::Status s = faulty_.WriteSync(0, 8192, buf.data(), 8192);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(memory_.file_bytes(0)[8192], 0) << "a failed write must not reach the target";
  EXPECT_TRUE(faulty_.WriteSync(0, 8192, buf.data(), 4096).ok()) << "exactly the budget fits";
  EXPECT_EQ(faulty_.counters().injected_no_space, 1u);
  EXPECT_TRUE(faulty_.ReadSync(0, 0, buf.data(), 8192).ok()) << "reads are not charged";
}

TEST_F(FaultInjectingIoEngineTest, ReadErrorOnlyInsideTheRange) {
  AlignedBuffer buf(4096);
  faulty_.AddReadError({1, 8192, 4096});
  EXPECT_EQ(faulty_.ReadSync(1, 8192, buf.data(), 4096).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(faulty_.ReadSync(1, 4096, buf.data(), 4096).ok());
  EXPECT_TRUE(faulty_.ReadSync(0, 8192, buf.data(), 4096).ok()) << "other file";
  EXPECT_TRUE(faulty_.WriteSync(1, 8192, buf.data(), 4096).ok()) << "writes unaffected";
  faulty_.ClearFaults();
  EXPECT_TRUE(faulty_.ReadSync(1, 8192, buf.data(), 4096).ok());
  EXPECT_EQ(faulty_.counters().injected_read_errors, 1u);
}

TEST_F(FaultInjectingIoEngineTest, WriteErrorWithChosenErrno) {
  AlignedBuffer buf(4096);
  faulty_.AddWriteError({0}, EROFS);
  EXPECT_EQ(faulty_.WriteSync(0, 0, buf.data(), 4096).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(FaultInjectingIoEngineTest, ShortWriteReportedAsErrorWritesOnlyPrefix) {
  AlignedBuffer buf(16384);
  std::fill(buf.data(), buf.data() + buf.size(), 0xAB);
  faulty_.SetShortWrites(ShortWriteMode::kReportError, 4096);
  ASSERT_TRUE(faulty_.Submit({{{IoOp::kWrite, 0, 0, buf.data(), 16384, 9}}}).ok());
  IoCompletion c;
  ASSERT_EQ(*faulty_.Reap({&c, 1}, absl::Seconds(5)), 1u);
  EXPECT_EQ(c.tag, 9u);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kDataLoss) << c.status;
  EXPECT_EQ(c.bytes, 4096u);
  EXPECT_EQ(memory_.file_bytes(0)[4095], 0xAB);
  EXPECT_EQ(memory_.file_bytes(0)[4096], 0);
}

TEST_F(FaultInjectingIoEngineTest, SilentShortWriteReportsSuccess) {
  AlignedBuffer buf(16384);
  std::fill(buf.data(), buf.data() + buf.size(), 0xCD);
  faulty_.SetShortWrites(ShortWriteMode::kSilent, 8192);
  EXPECT_TRUE(faulty_.WriteSync(0, 0, buf.data(), 16384).ok());
  EXPECT_EQ(memory_.file_bytes(0)[8191], 0xCD);
  EXPECT_EQ(memory_.file_bytes(0)[8192], 0);
  EXPECT_EQ(faulty_.counters().short_writes, 1u);
}

TEST_F(FaultInjectingIoEngineTest, LatencyDelaysCompletions) {
  AlignedBuffer buf(4096);
  faulty_.SetLatency(absl::Milliseconds(30));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(faulty_.ReadSync(0, 0, buf.data(), 4096).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));  // a lower bound only
}

TEST_F(FaultInjectingIoEngineTest, MixedBatchKeepsEveryTag) {
  AlignedBuffer buf(3 * 4096);
  faulty_.AddReadError({0, 4096, 4096});
  std::vector<IoRequest> reqs;
  for (uint64_t i = 0; i < 3; ++i) {
    reqs.push_back({IoOp::kRead, 0, i * 4096, buf.data() + i * 4096, 4096, 40 + i});
  }
  ASSERT_TRUE(faulty_.Submit(reqs).ok());
  std::map<uint64_t, absl::StatusCode> codes;
  std::vector<IoCompletion> out(4);
  while (codes.size() < 3) {
    auto n = faulty_.Reap(absl::MakeSpan(out), absl::Seconds(5));
    ASSERT_TRUE(n.ok());
    ASSERT_GT(*n, 0u);
    for (size_t i = 0; i < *n; ++i) codes[out[i].tag] = out[i].status.code();
  }
  EXPECT_EQ(codes[40], absl::StatusCode::kOk);
  EXPECT_EQ(codes[41], absl::StatusCode::kUnavailable);
  EXPECT_EQ(codes[42], absl::StatusCode::kOk);
  EXPECT_EQ(faulty_.outstanding(), 0u);
}

}  // namespace
}  // namespace memvirt::nvme

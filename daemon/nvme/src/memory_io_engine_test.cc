#include "memvirt/nvme/memory_io_engine.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace memvirt::nvme {
namespace {

using testing::AlignedBuffer;

TEST(MemoryIoEngineTest, WriteThenReadRoundTrips) {
  MemoryIoEngine engine({1 << 20, 1 << 20});
  AlignedBuffer out(64 << 10), in(64 << 10);
  testing::FillRandom(out.span(), 1);
  ASSERT_TRUE(engine.WriteSync(1, 128 << 10, out.data(), out.size()).ok());
  ASSERT_TRUE(engine.ReadSync(1, 128 << 10, in.data(), in.size()).ok());
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
  // The other file is untouched.
  ASSERT_TRUE(engine.ReadSync(0, 128 << 10, in.data(), in.size()).ok());
  EXPECT_EQ(in.data()[0], 0);
  EXPECT_EQ(engine.outstanding(), 0u);
}

TEST(MemoryIoEngineTest, RejectsInvalidRequests) {
  MemoryIoEngine engine({1 << 20});
  AlignedBuffer buf(8192);
  EXPECT_EQ(engine.Submit({{{IoOp::kRead, 1, 0, buf.data(), 4096, 0}}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit({{{IoOp::kRead, 0, (1 << 20) - 4096, buf.data(), 8192, 0}}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit({{{IoOp::kRead, 0, 100, buf.data(), 4096, 0}}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.Submit({{{IoOp::kRead, 0, 0, buf.data() + 1, 4096, 0}}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine.outstanding(), 0u);
  MemoryIoEngine buffered({1 << 20}, /*enforce_direct_alignment=*/false);
  EXPECT_TRUE(buffered.Submit({{{IoOp::kRead, 0, 100, buf.data() + 1, 4000, 0}}}).ok());
}

TEST(MemoryIoEngineTest, AsyncCompletionsCarryTagsAndReapTimesOut) {
  MemoryIoEngine engine({1 << 20});
  AlignedBuffer buf(16 << 10);
  std::vector<IoRequest> reqs;
  for (uint64_t i = 0; i < 4; ++i) {
    reqs.push_back({IoOp::kWrite, 0, i * 4096, buf.data() + i * 4096, 4096, 100 + i});
  }
  ASSERT_TRUE(engine.Submit(reqs).ok());
  EXPECT_EQ(engine.outstanding(), 4u);
  std::vector<IoCompletion> out(3);
  auto n = engine.Reap(absl::MakeSpan(out), absl::Seconds(1));
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 3u);
  EXPECT_EQ(out[0].tag, 100u);
  EXPECT_EQ(out[2].tag, 102u);
  n = engine.TryReap(absl::MakeSpan(out));
  ASSERT_EQ(*n, 1u);
  EXPECT_EQ(out[0].tag, 103u);
  EXPECT_EQ(out[0].bytes, 4096u);
  n = engine.Reap(absl::MakeSpan(out), absl::Milliseconds(5));
  EXPECT_EQ(*n, 0u);
}

}  // namespace
}  // namespace memvirt::nvme

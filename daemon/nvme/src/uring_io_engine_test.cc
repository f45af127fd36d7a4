#include "memvirt/nvme/uring_io_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "test_util.h"
#include "uring_test_util.h"

namespace memvirt::nvme {
namespace {

using testing::AlignedBuffer;
constexpr uint64_t kFileSize = 16 << 20;

class UringIoEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    fd_ = testing::OpenDirectFile(dir_.path() + "/f", kFileSize);
    if (fd_ < 0) GTEST_SKIP() << "O_DIRECT unsupported on " << dir_.path();
  }
  void TearDown() override {
    if (fd_ >= 0) close(fd_);
  }
  absl::StatusOr<std::unique_ptr<UringIoEngine>> MakeEngine(UringOptions options = {},
                                                            uint64_t size = kFileSize) {
    return UringIoEngine::Create({{fd_, size}}, options);
  }

  testing::TempDir dir_;
  int fd_ = -1;
};

TEST_F(UringIoEngineTest, SyncRoundTripWithDirectIo) {
  auto engine = MakeEngine();
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE((*engine)->direct_io());
  AlignedBuffer out(1 << 20), in(1 << 20);
  testing::FillRandom(out.span(), 1);
  ASSERT_TRUE((*engine)->WriteSync(0, 4 << 20, out.data(), out.size()).ok());
  ASSERT_TRUE((*engine)->ReadSync(0, 4 << 20, in.data(), in.size()).ok());
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
  // And the bytes really are in the file.
  AlignedBuffer check(1 << 20);
  ASSERT_EQ(pread(fd_, check.data(), check.size(), 4 << 20), static_cast<ssize_t>(check.size()));
  EXPECT_EQ(testing::Fnv1a(check.span()), testing::Fnv1a(out.span()));
}

TEST_F(UringIoEngineTest, MisalignedRequestsRejectedForDirectIo) {
  auto engine = MakeEngine();
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok());
  AlignedBuffer buf(8192);
  EXPECT_EQ((*engine)->ReadSync(0, 512, buf.data(), 4096).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->ReadSync(0, 0, buf.data() + 512, 4096).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*engine)->ReadSync(0, kFileSize, buf.data(), 4096).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(UringIoEngineTest, MoreRequestsThanQueueDepthWithRegisteredBuffers) {
  UringOptions options;
  options.queue_depth = 4;
  auto engine = MakeEngine(options);
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok());
  constexpr size_t kBlock = 256 << 10;
  constexpr int kBlocks = 32;  // 8 MiB, 8x the queue depth
  AlignedBuffer out(kBlock * kBlocks), in(kBlock * kBlocks);
  testing::FillRandom(out.span(), 2);
  const iovec regions[] = {{out.data(), out.size()}, {in.data(), in.size()}};
  const bool registered = (*engine)->RegisterBuffers(regions).ok();
  std::vector<IoRequest> writes;
  for (int i = 0; i < kBlocks; ++i) {
    writes.push_back(
        {IoOp::kWrite, 0, uint64_t(i) * kBlock, out.data() + i * kBlock, kBlock, uint64_t(i)});
  }
  ASSERT_TRUE((*engine)->Submit(writes).ok());
  EXPECT_EQ((*engine)->outstanding(), size_t{kBlocks});
  std::vector<bool> seen(kBlocks, false);
  std::vector<IoCompletion> cs(8);
  for (int got = 0; got < kBlocks;) {
    auto n = (*engine)->Reap(absl::MakeSpan(cs), absl::Seconds(10));
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_GT(*n, 0u) << "timed out";
    for (size_t i = 0; i < *n; ++i) {
      ASSERT_TRUE(cs[i].status.ok()) << cs[i].status;
      ASSERT_FALSE(seen[cs[i].tag]);
      seen[cs[i].tag] = true;
      EXPECT_EQ(cs[i].bytes, kBlock);
    }
    got += static_cast<int>(*n);
  }
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_TRUE((*engine)->ReadSync(0, uint64_t(i) * kBlock, in.data() + i * kBlock, kBlock).ok());
  }
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
  if (registered) {
    EXPECT_TRUE((*engine)->buffers_registered());
    EXPECT_EQ((*engine)->stats().fixed_buffer_ops, 2u * kBlocks);
  }
  EXPECT_NE((*engine)->description().find("qd=4"), std::string::npos);
}

TEST_F(UringIoEngineTest, ShortReadAtEndOfFileIsRequeuedThenFails) {
  // Tell the engine the file is larger than it is: the read crossing the real end gets a short
  // result (requeued for the rest), then zero bytes (end of file) which must fail, not spin.
  auto engine = MakeEngine({}, kFileSize + (1 << 20));
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok());
  AlignedBuffer buf(1 << 20);
  ASSERT_TRUE(
      (*engine)->Submit({{{IoOp::kRead, 0, kFileSize - 8192, buf.data(), 1 << 20, 5}}}).ok());
  IoCompletion c;
  ASSERT_EQ(*(*engine)->Reap({&c, 1}, absl::Seconds(10)), 1u);
  EXPECT_EQ(c.tag, 5u);
  EXPECT_EQ(c.status.code(), absl::StatusCode::kUnavailable) << c.status;
  EXPECT_EQ(c.bytes, 8192u);
  EXPECT_EQ((*engine)->stats().requeued_short, 1u);
}

TEST_F(UringIoEngineTest, ReapTimesOutWhenIdleAndWhenBusy) {
  auto engine = MakeEngine();
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok());
  IoCompletion c;
  auto n = (*engine)->Reap({&c, 1}, absl::Milliseconds(10));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  EXPECT_EQ(*(*engine)->TryReap({&c, 1}), 0u);
}

TEST_F(UringIoEngineTest, ConcurrentSubmittersOneReaper) {
  UringOptions options;
  options.queue_depth = 8;
  auto engine = MakeEngine(options);
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok());
  constexpr int kThreads = 4, kPerThread = 16;
  constexpr size_t kBlock = 64 << 10;
  AlignedBuffer out(kBlock * kThreads * kPerThread);
  testing::FillRandom(out.span(), 3);
  std::atomic<int> completed{0}, failed{0};
  std::thread reaper([&] {
    std::vector<IoCompletion> cs(16);
    while (completed.load() < kThreads * kPerThread) {
      auto n = (*engine)->Reap(absl::MakeSpan(cs), absl::Milliseconds(50));
      if (!n.ok()) {
        ++failed;
        return;
      }
      for (size_t i = 0; i < *n; ++i) failed += !cs[i].status.ok();
      completed += static_cast<int>(*n);
    }
  });
  std::vector<std::thread> submitters;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t idx = size_t(t) * kPerThread + i;
        absl::Status s = (*engine)->Submit(
            {{{IoOp::kWrite, 0, idx * kBlock, out.data() + idx * kBlock, kBlock, idx}}});
        if (!s.ok()) ++failed;
      }
    });
  }
  for (auto& s : submitters) s.join();
  reaper.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(completed.load(), kThreads * kPerThread);
  AlignedBuffer in(out.size());
  ASSERT_EQ(pread(fd_, in.data(), in.size(), 0), static_cast<ssize_t>(in.size()));
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
}

TEST_F(UringIoEngineTest, PolledCompletionsWhenTheDeviceSupportsThem) {
  UringOptions options;
  options.io_poll = true;
  auto engine = MakeEngine(options);
  MEMVIRT_SKIP_IF_NO_URING(engine);
  ASSERT_TRUE(engine.ok()) << engine.status();
  AlignedBuffer out(1 << 20), in(1 << 20);
  testing::FillRandom(out.span(), 4);
  const absl::Status s = (*engine)->WriteSync(0, 0, out.data(), out.size());
  if (absl::IsUnimplemented(s)) GTEST_SKIP() << "device has no poll queues: " << s;
  ASSERT_TRUE(s.ok()) << s;
  const absl::Status r = (*engine)->ReadSync(0, 0, in.data(), in.size());
  if (absl::IsUnimplemented(r)) GTEST_SKIP() << "device has no poll queues: " << r;
  ASSERT_TRUE(r.ok()) << r;
  EXPECT_EQ(testing::Fnv1a(in.span()), testing::Fnv1a(out.span()));
}

}  // namespace
}  // namespace memvirt::nvme

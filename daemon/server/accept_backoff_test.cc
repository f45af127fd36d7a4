#include "daemon/server/accept_backoff.h"

#include <cerrno>

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

TEST(AcceptBackoffTest, TransientErrorsRetryAtOnce) {
  AcceptBackoff b("test.sock");
  for (int err : {EAGAIN, EINTR, ECONNABORTED, EPROTO}) {
    EXPECT_EQ(b.OnError(err, absl::UnixEpoch()), absl::ZeroDuration()) << err;
  }
}

TEST(AcceptBackoffTest, RunningOutOfDescriptorsBacksOffExponentiallyUpToASecond) {
  AcceptBackoff b("test.sock");
  absl::Time now = absl::UnixEpoch();
  EXPECT_EQ(b.OnError(EMFILE, now), absl::Milliseconds(10));
  EXPECT_EQ(b.OnError(ENFILE, now), absl::Milliseconds(20));
  EXPECT_EQ(b.OnError(EMFILE, now), absl::Milliseconds(40));
  absl::Duration last;
  for (int i = 0; i < 20; ++i) last = b.OnError(ENOBUFS, now);
  EXPECT_EQ(last, AcceptBackoff::kMax);
  b.OnSuccess();
  EXPECT_EQ(b.OnError(EMFILE, now), AcceptBackoff::kFirst);
}

TEST(LogLimiterTest, OneLinePerIntervalWithTheCountLeftOut) {
  LogLimiter limiter(absl::Seconds(10));
  const absl::Time t0 = absl::UnixEpoch();
  uint64_t suppressed = 99;
  ASSERT_TRUE(limiter.Allow(t0, &suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(limiter.Allow(t0 + absl::Seconds(i), &suppressed));
  ASSERT_TRUE(limiter.Allow(t0 + absl::Seconds(10), &suppressed));
  EXPECT_EQ(suppressed, 5u);
}

}  // namespace
}  // namespace memvirt::daemon

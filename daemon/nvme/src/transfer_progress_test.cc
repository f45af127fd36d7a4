#include "transfer_progress.h"

#include <gtest/gtest.h>

namespace memvirt::nvme::internal {
namespace {

TEST(TransferProgressTest, FullResultCompletes) {
  size_t done = 0;
  int err = 0;
  EXPECT_EQ(OnCqeResult(8192, 8192, &done, &err), CqeAction::kComplete);
  EXPECT_EQ(done, 8192u);
}

TEST(TransferProgressTest, EagainAndEintrRequeueWithoutProgress) {
  size_t done = 4096;
  int err = 0;
  EXPECT_EQ(OnCqeResult(-EAGAIN, 8192, &done, &err), CqeAction::kRequeue);
  EXPECT_EQ(OnCqeResult(-EINTR, 8192, &done, &err), CqeAction::kRequeue);
  EXPECT_EQ(done, 4096u);
}

TEST(TransferProgressTest, ShortTransfersAdvanceUntilComplete) {
  size_t done = 0;
  int err = 0;
  EXPECT_EQ(OnCqeResult(4096, 3 * 4096, &done, &err), CqeAction::kRequeue);
  EXPECT_EQ(done, 4096u);
  EXPECT_EQ(OnCqeResult(4096, 3 * 4096, &done, &err), CqeAction::kRequeue);
  EXPECT_EQ(done, 8192u);
  EXPECT_EQ(OnCqeResult(4096, 3 * 4096, &done, &err), CqeAction::kComplete);
  EXPECT_EQ(done, 3u * 4096);
}

TEST(TransferProgressTest, ErrorsAndZeroResultsFail) {
  size_t done = 4096;
  int err = 0;
  EXPECT_EQ(OnCqeResult(-ENOSPC, 8192, &done, &err), CqeAction::kFail);
  EXPECT_EQ(err, ENOSPC);
  EXPECT_EQ(done, 4096u);
  EXPECT_EQ(OnCqeResult(0, 8192, &done, &err), CqeAction::kFail);
  EXPECT_EQ(err, EIO);
}

}  // namespace
}  // namespace memvirt::nvme::internal

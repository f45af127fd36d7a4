#include "memvirt/nvme/errno_status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace memvirt::nvme {
namespace {

TEST(ErrnoStatusTest, MapsTheCodesTheDaemonReliesOn) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EDQUOT, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "r").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(EACCES, "o").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoToStatus(ENOENT, "o").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoToStatus(EEXIST, "o").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoToStatus(EINVAL, "o").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus(ENOSYS, "o").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToStatus(EOPNOTSUPP, "o").code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrnoToStatus(ECANCELED, "o").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(ErrnoToStatus(ELOOP, "o").code(), absl::StatusCode::kInternal);
}

TEST(ErrnoStatusTest, AcceptsNegativeErrnoAsLiburingReturnsIt) {
  EXPECT_EQ(ErrnoToStatus(-ENOSPC, "w").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ErrnoToStatus(0, "nothing").ok());
}

TEST(ErrnoStatusTest, MessageNamesContextAndErrno) {
  const absl::Status s = ErrnoToStatus(-EIO, "read file 2");
  EXPECT_NE(s.message().find("read file 2"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("errno 5"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace memvirt::nvme

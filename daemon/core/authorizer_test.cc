#include "daemon/core/authorizer.h"

#include "gtest/gtest.h"

namespace memvirt::daemon {
namespace {

TEST(AuthorizerTest, RootIsOperator) {
  Authorizer a(std::nullopt);
  EXPECT_TRUE(a.IsOperator({.pid = 1, .uid = 0, .gid = 0}));
  EXPECT_FALSE(a.IsOperator({.pid = 1, .uid = 1000, .gid = 1000}));
}

TEST(AuthorizerTest, AdminGroupPrimaryOrSupplementary) {
  Authorizer a(gid_t{42});
  EXPECT_TRUE(a.IsOperator({.pid = 1, .uid = 1000, .gid = 42}));
  EXPECT_TRUE(a.IsOperator({.pid = 1, .uid = 1000, .gid = 1000, .groups = {7, 42}}));
  EXPECT_FALSE(a.IsOperator({.pid = 1, .uid = 1000, .gid = 1000, .groups = {7}}));
  const absl::Status s = a.RequireOperator({.pid = 1, .uid = 1000, .gid = 1000}, "drain");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("drain"), absl::string_view::npos);
}

TEST(AuthorizerTest, UsersSeeOnlyTheirOwnProcesses) {
  Authorizer a(std::nullopt);
  const PeerCredentials alice{.pid = 10, .uid = 1000, .gid = 1000};
  const PeerCredentials bob{.pid = 11, .uid = 1001, .gid = 1001};
  EXPECT_TRUE(a.MaySee(alice, alice));
  EXPECT_FALSE(a.MaySee(alice, bob));
  EXPECT_TRUE(a.MaySee({.pid = 1, .uid = 0, .gid = 0}, bob));
}

}  // namespace
}  // namespace memvirt::daemon

#include "node_capacity.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace memsim {
namespace {

std::string UniqueNode(const char* tag) {
  return std::string("unit-") + tag + "-" + std::to_string(getpid());
}

class SimNodeCapacityTest : public ::testing::Test {
 protected:
  void TearDown() override { shm_unlink(("/memsim-" + node_).c_str()); }
  std::string node_;
};

TEST_F(SimNodeCapacityTest, TwoHandlesOnOneNodeShareTheCapacity) {
  node_ = UniqueNode("share");
  auto a = NodeCapacity::Open(node_, 0, 1000);
  auto b = NodeCapacity::Open(node_, 0, 5000);  // first creator's capacity wins
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->capacity(), 1000u);
  EXPECT_TRUE(a->TryCharge(700));
  EXPECT_EQ(b->Used(), 700u);
  EXPECT_FALSE(b->TryCharge(400));
  a->Release(700);
  EXPECT_TRUE(b->TryCharge(400));
  b->Release(400);
}

TEST_F(SimNodeCapacityTest, DevicesOfANodeAreIndependent) {
  node_ = UniqueNode("devices");
  auto d0 = NodeCapacity::Open(node_, 0, 100);
  auto d1 = NodeCapacity::Open(node_, 1, 100);
  ASSERT_TRUE(d0 && d1);
  EXPECT_TRUE(d0->TryCharge(100));
  EXPECT_TRUE(d1->TryCharge(100));
  d0->Release(100);
  d1->Release(100);
}

TEST_F(SimNodeCapacityTest, UsageOfAKilledProcessIsReclaimed) {
  node_ = UniqueNode("reap");
  auto parent = NodeCapacity::Open(node_, 0, 1000);
  ASSERT_TRUE(parent);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto mine = NodeCapacity::Open(node_, 0, 1000);
    char ok = (mine && mine->TryCharge(800)) ? 1 : 0;
    (void)!write(ready[1], &ok, 1);
    pause();  // until SIGKILL
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  EXPECT_FALSE(parent->TryCharge(300));  // the child holds 800 of 1000
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  EXPECT_TRUE(parent->TryCharge(300));  // reaped on the failing path
  EXPECT_EQ(parent->Used(), 300u);
  parent->Release(300);
  close(ready[0]);
  close(ready[1]);
}

TEST(SimNodeCapacity, RejectsNamesWithSlashes) {
  EXPECT_EQ(NodeCapacity::Open("a/b", 0, 10), nullptr);
  EXPECT_EQ(NodeCapacity::Open("", 0, 10), nullptr);
}

}  // namespace
}  // namespace memsim

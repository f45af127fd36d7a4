#include "shim/core/graph_walk.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "shim/testing/fake_driver.h"

namespace memvirt::shim {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The first 8-byte word of argument `param`.
uint64_t WordAt(void** params, int param) {
  uint64_t word;
  std::memcpy(&word, params[param], sizeof(word));
  return word;
}

class GraphWalkTest : public ::testing::Test {
 protected:
  testing::FakeDriver fake_{64 * kMiB};
};

TEST_F(GraphWalkTest, KernelNodesKeepTheirFunctionAndArguments) {
  CUfunction f = fake_.MakeFunction({8, 8});
  CUgraph g = fake_.MakeGraph();
  fake_.AddKernelNode(g, f, {0x1234, 0x5678});
  GraphWalk walk;
  WalkGraph(fake_.driver(), g, &walk);
  ASSERT_TRUE(walk.decodable) << walk.why;
  EXPECT_EQ(walk.nodes, 1u);
  ASSERT_EQ(walk.kernels.size(), 1u);
  EXPECT_EQ(walk.kernels[0].function, f);
  ASSERT_NE(walk.kernels[0].params, nullptr);
  EXPECT_EQ(WordAt(walk.kernels[0].params, 0), 0x1234u);
  EXPECT_EQ(WordAt(walk.kernels[0].params, 1), 0x5678u);
  EXPECT_TRUE(walk.kernels[0].extra_words.empty());
  EXPECT_FALSE(walk.extra_buffer);
}

TEST_F(GraphWalkTest, ExtraBuffersAreCopiedWordByWord) {
  CUgraph g = fake_.MakeGraph();
  fake_.AddKernelNode(g, fake_.MakeFunction({8, 8, 8}), {7, 8, 9}, /*via_extra=*/true);
  GraphWalk walk;
  WalkGraph(fake_.driver(), g, &walk);
  ASSERT_TRUE(walk.decodable) << walk.why;
  EXPECT_TRUE(walk.extra_buffer);
  ASSERT_EQ(walk.kernels.size(), 1u);
  EXPECT_EQ(walk.kernels[0].params, nullptr);
  EXPECT_EQ(walk.kernels[0].extra_words, (std::vector<uint64_t>{7, 8, 9}));
}

// Copy and memset ranges are kept wherever they point: which of them fall in
// a reservation is the core's decision, not the walk's.
TEST_F(GraphWalkTest, CopyAndMemsetNodesGiveTheirDeviceRanges) {
  CUgraph g = fake_.MakeGraph();
  fake_.AddMemcpyNode(g, /*dst=*/0x10000, /*src=*/0x20000, 4096);
  fake_.AddMemsetNode(g, 0x30000, 100);
  fake_.AddNode(g, CU_GRAPH_NODE_TYPE_HOST);
  fake_.AddNode(g, CU_GRAPH_NODE_TYPE_EMPTY);
  fake_.AddNode(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  GraphWalk walk;
  WalkGraph(fake_.driver(), g, &walk);
  ASSERT_TRUE(walk.decodable) << walk.why;
  EXPECT_EQ(walk.nodes, 5u);
  ASSERT_EQ(walk.ranges.size(), 3u);
  EXPECT_EQ(walk.ranges[0].ptr, 0x20000u);  // source side first
  EXPECT_EQ(walk.ranges[0].bytes, 4096u);
  EXPECT_EQ(walk.ranges[1].ptr, 0x10000u);
  EXPECT_EQ(walk.ranges[1].bytes, 4096u);
  EXPECT_EQ(walk.ranges[2].ptr, 0x30000u);
  EXPECT_EQ(walk.ranges[2].bytes, 100u);
  EXPECT_TRUE(walk.kernels.empty());
}

TEST_F(GraphWalkTest, ChildGraphsAreWalkedInPlace) {
  CUgraph child = fake_.MakeGraph();
  fake_.AddKernelNode(child, fake_.MakeFunction({8}), {42});
  CUgraph parent = fake_.MakeGraph();
  fake_.AddMemsetNode(parent, 0x30000, 8);
  fake_.AddChildGraphNode(parent, child);
  GraphWalk walk;
  WalkGraph(fake_.driver(), parent, &walk);
  ASSERT_TRUE(walk.decodable) << walk.why;
  EXPECT_EQ(walk.nodes, 3u);
  ASSERT_EQ(walk.kernels.size(), 1u);
  EXPECT_EQ(WordAt(walk.kernels[0].params, 0), 42u);
  EXPECT_EQ(walk.ranges.size(), 1u);
}

TEST_F(GraphWalkTest, NodesTheShimCannotDecodeEndTheWalkWithTheFirstReason) {
  CUgraph g = fake_.MakeGraph();
  fake_.AddNode(g, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
  fake_.AddNode(g, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  fake_.AddMemsetNode(g, 0x30000, 8);
  GraphWalk walk;
  WalkGraph(fake_.driver(), g, &walk);
  EXPECT_FALSE(walk.decodable);
  ASSERT_NE(walk.why, nullptr);
  EXPECT_EQ(std::string(walk.why), "a node type the shim cannot decode");
  EXPECT_EQ(walk.nodes, 1u);  // stopped at the first
  EXPECT_TRUE(walk.ranges.empty());
}

TEST_F(GraphWalkTest, ChildGraphsNestedTooDeeplyAreOpaque) {
  CUgraph inner = fake_.MakeGraph();
  fake_.AddMemsetNode(inner, 0x30000, 8);
  for (int depth = 0; depth < 17; ++depth) {
    CUgraph outer = fake_.MakeGraph();
    fake_.AddChildGraphNode(outer, inner);
    inner = outer;
  }
  GraphWalk walk;
  WalkGraph(fake_.driver(), inner, &walk);
  EXPECT_FALSE(walk.decodable);
  EXPECT_EQ(std::string(walk.why), "child graphs nested too deeply");
}

// A driver without the queries, or one whose query fails, gives an opaque
// walk with the reason.
CUresult FailingKernelParams(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2*) {
  return CUDA_ERROR_INVALID_VALUE;
}

TEST_F(GraphWalkTest, MissingOrFailingQueriesMakeTheWalkOpaque) {
  CUgraph g = fake_.MakeGraph();
  fake_.AddKernelNode(g, fake_.MakeFunction({8}), {1});
  Driver lacking = fake_.driver();
  lacking.cuGraphGetNodes = nullptr;
  GraphWalk walk;
  WalkGraph(lacking, g, &walk);
  EXPECT_FALSE(walk.decodable);
  EXPECT_EQ(std::string(walk.why), "the driver lacks graph queries");

  Driver failing = fake_.driver();
  failing.cuGraphKernelNodeGetParams_v2 = &FailingKernelParams;
  GraphWalk failed;
  WalkGraph(failing, g, &failed);
  EXPECT_FALSE(failed.decodable);
  EXPECT_EQ(std::string(failed.why), "kernel node parameters unavailable");
  EXPECT_TRUE(failed.kernels.empty());
}

}  // namespace
}  // namespace memvirt::shim

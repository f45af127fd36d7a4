// Cross-stream capture (the CUDA programming guide, "Cross-stream Dependencies and Events"): an
// event recorded on a capturing stream is a captured event; a stream waiting on it joins the
// capture; the capture ends on its origin stream once every joined stream has been joined back.
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"}});

constexpr size_t kN = 1024;

class SimCrossStreamCaptureTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuStreamCreate(&origin_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&side_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventCreate(&fork_, CU_EVENT_DISABLE_TIMING));
    ASSERT_CU(cuEventCreate(&join_, CU_EVENT_DISABLE_TIMING));
    for (CUdeviceptr* p : {&a_, &b_, &c_, &d_}) {
      ASSERT_CU(cuMemAlloc(p, kN * 4));
      ASSERT_CU(cuMemsetD32(*p, 0, kN));
    }
  }
  void TearDown() override {
    cuCtxSynchronize();
    for (CUevent e : {fork_, join_}) cuEventDestroy(e);
    for (CUstream s : {origin_, side_}) cuStreamDestroy(s);
    SimTest::TearDown();
  }

  std::vector<uint32_t> Read(CUdeviceptr p) {
    std::vector<uint32_t> v(kN);
    EXPECT_CU(cuMemcpyDtoH(v.data(), p, kN * 4));
    return v;
  }
  CUstreamCaptureStatus Status(CUstream s) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_CU(cuStreamIsCapturing(s, &status));
    return status;
  }
  cuuint64_t CaptureId(CUstream s) {
    CUstreamCaptureStatus status;
    cuuint64_t id = 0;
    EXPECT_CU(cuStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
    return id;
  }
  // Origin: a = 1; fork. Side: b = a. Origin: c = 3. (Not joined yet.)
  void CaptureFork(CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL) {
    ASSERT_CU(cuStreamBeginCapture(origin_, mode));
    ASSERT_CU(cuMemsetD32Async(a_, 1, kN, origin_));
    ASSERT_CU(cuEventRecord(fork_, origin_));
    ASSERT_CU(cuStreamWaitEvent(side_, fork_, 0));
    ASSERT_CU(cuMemcpyDtoDAsync(b_, a_, kN * 4, side_));
    ASSERT_CU(cuMemsetD32Async(c_, 3, kN, origin_));
  }
  std::vector<CUgraphNode> Dependencies(CUgraphNode node) {
    size_t n = 0;
    EXPECT_CU(cuGraphNodeGetDependencies(node, nullptr, nullptr, &n));
    std::vector<CUgraphNode> deps(n);
    if (n > 0) {
      EXPECT_CU(cuGraphNodeGetDependencies(node, deps.data(), nullptr, &n));
    }
    return deps;
  }

  CUstream origin_ = nullptr;
  CUstream side_ = nullptr;
  CUevent fork_ = nullptr;
  CUevent join_ = nullptr;
  CUdeviceptr a_ = 0, b_ = 0, c_ = 0, d_ = 0;
};

TEST_F(SimCrossStreamCaptureTest, ForkedAndJoinedStreamsCaptureIntoOneGraph) {
  CaptureFork(CU_STREAM_CAPTURE_MODE_RELAXED);  // relaxed: event queries are not prohibited
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(CaptureId(side_), CaptureId(origin_));
  // A captured event stands for nodes, not for scheduled work.
  EXPECT_EQ(cuEventQuery(fork_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuEventSynchronize(fork_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  // Only the origin stream ends the capture.
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(side_, &graph), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuEventRecord(join_, side_));
  ASSERT_CU(cuStreamWaitEvent(origin_, join_, 0));
  ASSERT_CU(cuMemcpyDtoDAsync(d_, b_, kN * 4, origin_));  // after both branches
  ASSERT_CU(cuStreamEndCapture(origin_, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_NONE);  // out of capture with the origin
  EXPECT_EQ(Status(origin_), CU_STREAM_CAPTURE_STATUS_NONE);
  for (CUdeviceptr p : {a_, b_, c_, d_}) EXPECT_EQ(Read(p), std::vector<uint32_t>(kN, 0));

  // Nodes in capture order: a = 1, b = a, c = 3, d = b.
  size_t n = 4;
  std::vector<CUgraphNode> nodes(n);
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &n));
  ASSERT_EQ(n, 4u);
  EXPECT_EQ(Dependencies(nodes[0]), std::vector<CUgraphNode>{});
  EXPECT_EQ(Dependencies(nodes[1]), std::vector<CUgraphNode>{nodes[0]});
  EXPECT_EQ(Dependencies(nodes[2]), std::vector<CUgraphNode>{nodes[0]});
  EXPECT_EQ(Dependencies(nodes[3]), (std::vector<CUgraphNode>{nodes[2], nodes[1]}));

  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, origin_));
  ASSERT_CU(cuStreamSynchronize(origin_));
  EXPECT_EQ(Read(b_), std::vector<uint32_t>(kN, 1));
  EXPECT_EQ(Read(c_), std::vector<uint32_t>(kN, 3));
  EXPECT_EQ(Read(d_), std::vector<uint32_t>(kN, 1));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));

  // Recorded again outside a capture, the event is an ordinary one.
  ASSERT_CU(cuEventRecord(fork_, side_));
  ASSERT_CU(cuEventSynchronize(fork_));
  EXPECT_CU(cuEventQuery(fork_));
}

TEST_F(SimCrossStreamCaptureTest, AStreamNotJoinedBackFailsTheCapture) {
  CaptureFork();
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(Status(origin_), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_NONE);
  // Both streams run work again, and nothing captured ran.
  EXPECT_EQ(Read(b_), std::vector<uint32_t>(kN, 0));
  ASSERT_CU(cuMemsetD32Async(b_, 7, kN, side_));
  ASSERT_CU(cuStreamSynchronize(side_));
  EXPECT_EQ(Read(b_), std::vector<uint32_t>(kN, 7));
}

TEST_F(SimCrossStreamCaptureTest, AForkWithoutWorkNeedsNoJoin) {
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(a_, 1, kN, origin_));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  ASSERT_CU(cuStreamWaitEvent(side_, fork_, 0));  // joins, captures nothing
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(origin_, &graph));
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(SimCrossStreamCaptureTest, WaitsWithinOneStreamAddNothing) {
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuMemsetD32Async(a_, 1, kN, origin_));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  ASSERT_CU(cuStreamWaitEvent(origin_, fork_, 0));
  ASSERT_CU(cuMemsetD32Async(b_, 2, kN, origin_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(origin_, &graph));
  size_t n = 2;
  std::vector<CUgraphNode> nodes(n);
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &n));
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(Dependencies(nodes[1]), std::vector<CUgraphNode>{nodes[0]});
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(SimCrossStreamCaptureTest, TwoCapturesDoNotMerge) {
  CUstream other;
  ASSERT_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(cuStreamBeginCapture(other, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  EXPECT_EQ(cuStreamWaitEvent(other, fork_, 0), CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(other, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(cuStreamDestroy(other));
}

TEST_F(SimCrossStreamCaptureTest, WaitingOnWorkOutsideTheCaptureIsNotSimulated) {
  ASSERT_CU(cuEventRecord(fork_, side_));  // an ordinary event
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuStreamWaitEvent(origin_, fork_, 0), CUDA_ERROR_NOT_SUPPORTED);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  // External event nodes are not simulated either.
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  EXPECT_EQ(cuStreamWaitEvent(side_, fork_, CU_EVENT_WAIT_EXTERNAL), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(Status(side_), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

TEST_F(SimCrossStreamCaptureTest, AJoinedBlockingStreamMakesTheLegacyStreamUnusable) {
  CUstream blocking;
  ASSERT_CU(cuStreamCreate(&blocking, 0));
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  ASSERT_CU(Launch(no_args(), nullptr));  // the origin does not block: allowed
  ASSERT_CU(cuStreamWaitEvent(blocking, fork_, 0));
  EXPECT_EQ(Launch(no_args(), nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(Status(blocking), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(Launch(no_args(), nullptr));  // usable again
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuStreamDestroy(blocking));
}

TEST_F(SimCrossStreamCaptureTest, DestroyingAJoinedStreamInvalidatesTheCapture) {
  CUstream doomed;
  ASSERT_CU(cuStreamCreate(&doomed, 0));
  ASSERT_CU(cuStreamBeginCapture(origin_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuEventRecord(fork_, origin_));
  ASSERT_CU(cuStreamWaitEvent(doomed, fork_, 0));
  ASSERT_CU(cuStreamDestroy(doomed));
  CUgraph graph = nullptr;
  EXPECT_EQ(cuStreamEndCapture(origin_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(Launch(no_args(), nullptr));  // no blocking capture is left behind
  ASSERT_CU(cuCtxSynchronize());
}

}  // namespace
}  // namespace memsim_test

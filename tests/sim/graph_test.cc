// Stream capture and CUDA graphs, per the CUDA documentation: captured work is recorded, not run;
// graph launches replay it (with the parameters copied at capture or node-creation time); the
// documented errors and invalidation rules; launches of one executable graph are ordered.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "mixed_args.h"
#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"}});

constexpr size_t kN = 1024;

class SimGraphTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemAlloc(&buf_, kN * 4));
    ASSERT_CU(cuMemsetD32(buf_, 0, kN));
  }
  void TearDown() override {
    cuCtxSynchronize();
    if (stream_ != nullptr) cuStreamDestroy(stream_);
    SimTest::TearDown();
  }

  std::vector<uint32_t> Read(CUdeviceptr p, size_t n) {
    std::vector<uint32_t> v(n);
    EXPECT_CU(cuMemcpyDtoH(v.data(), p, n * 4));
    return v;
  }
  CUstreamCaptureStatus Status(CUstream s) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    EXPECT_CU(cuStreamIsCapturing(s, &status));
    return status;
  }
  // Instantiates, launches `times` times on `s`, synchronizes.
  void Run(CUgraph graph, int times, CUstream s) {
    CUgraphExec exec;
    ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < times; ++i) ASSERT_CU(cuGraphLaunch(exec, s));
    ASSERT_CU(cuStreamSynchronize(s));
    ASSERT_CU(cuGraphExecDestroy(exec));
  }

  CUstream stream_ = nullptr;
  CUdeviceptr buf_ = 0;
};

TEST_F(SimGraphTest, CapturedWorkIsRecordedNotExecuted) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(Launch(fill(), stream_, buf_, 7u, static_cast<uint64_t>(kN)));
  ASSERT_CU(cuMemsetD32Async(buf_, 9, 4, stream_));
  std::vector<uint32_t> host(2, 5);
  ASSERT_CU(cuMemcpyHtoDAsync(buf_ + 8, host.data(), 8, stream_));
  CUgraph graph = nullptr;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(Read(buf_, kN), std::vector<uint32_t>(kN, 0));  // nothing ran

  Run(graph, 1, stream_);
  std::vector<uint32_t> expected(kN, 7);
  for (int i = 0; i < 4; ++i) expected[i] = i < 2 ? 9 : 5;  // memset, then the copy over [2, 4)
  EXPECT_EQ(Read(buf_, kN), expected);
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(SimGraphTest, ReplayRunsTheCapturedSequenceEachTime) {
  std::vector<float> x(kN), y(kN, 1.0f);
  for (size_t i = 0; i < kN; ++i) x[i] = static_cast<float>(i);
  CUdeviceptr dx, dy;
  ASSERT_CU(cuMemAlloc(&dx, kN * 4));
  ASSERT_CU(cuMemAlloc(&dy, kN * 4));
  ASSERT_CU(cuMemcpyHtoD(dx, x.data(), kN * 4));
  ASSERT_CU(cuMemcpyHtoD(dy, y.data(), kN * 4));
  float a = 2.0f;
  int n = static_cast<int>(kN);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Launch(saxpy(), stream_, a, dx, dy, n));  // y += 2x
  a = 100.0f;                                         // arguments were copied at capture time
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemcpyDtoH(y.data(), dy, kN * 4));
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], 1.0f + 4.0f * i) << i;
  // The executable graph does not depend on its graph.
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuMemcpyDtoH(y.data(), dy, kN * 4));
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(y[i], 1.0f + 6.0f * i) << i;
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuMemFree(dx));
  ASSERT_CU(cuMemFree(dy));
}

TEST_F(SimGraphTest, NodesReportTheirTypesAndCopiedParameters) {
  uint32_t value = 42;
  uint64_t count = kN;
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  void* params[] = {&buf_, &value, &count};
  ASSERT_CU(cuLaunchKernel(fill(), 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr));
  ASSERT_CU(cuMemsetD8Async(buf_, 1, 16, stream_));
  std::vector<uint32_t> host(kN);
  ASSERT_CU(cuMemcpyDtoHAsync(host.data(), buf_, kN * 4, stream_));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  value = 0;  // the node keeps its own copy

  size_t n = 0;
  ASSERT_CU(cuGraphGetNodes(graph, nullptr, &n));
  ASSERT_EQ(n, 3u);
  std::vector<CUgraphNode> nodes(5, reinterpret_cast<CUgraphNode>(1));
  n = nodes.size();
  ASSERT_CU(cuGraphGetNodes(graph, nodes.data(), &n));
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(nodes[3], nullptr);  // the rest of a longer array is cleared
  const CUgraphNodeType expected[] = {CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMSET,
                                      CU_GRAPH_NODE_TYPE_MEMCPY};
  for (size_t i = 0; i < 3; ++i) {
    CUgraphNodeType type;
    ASSERT_CU(cuGraphNodeGetType(nodes[i], &type));
    EXPECT_EQ(type, expected[i]) << i;
  }
  // A captured sequence is a chain: one root, each node depends on the previous one.
  size_t roots = 0;
  ASSERT_CU(cuGraphGetRootNodes(graph, nullptr, &roots));
  EXPECT_EQ(roots, 1u);
  CUgraphNode dep = nullptr;
  size_t ndeps = 1;
  ASSERT_CU(cuGraphNodeGetDependencies(nodes[2], &dep, nullptr, &ndeps));
  EXPECT_EQ(ndeps, 1u);
  EXPECT_EQ(dep, nodes[1]);

  CUDA_KERNEL_NODE_PARAMS k;
  ASSERT_CU(cuGraphKernelNodeGetParams(nodes[0], &k));
  EXPECT_EQ(k.func, fill());
  EXPECT_EQ(k.extra, nullptr);
  ASSERT_NE(k.kernelParams, nullptr);
  EXPECT_NE(k.kernelParams[1], static_cast<void*>(&value));  // owned by the node
  EXPECT_EQ(*static_cast<CUdeviceptr*>(k.kernelParams[0]), buf_);
  EXPECT_EQ(*static_cast<uint32_t*>(k.kernelParams[1]), 42u);
  EXPECT_EQ(*static_cast<uint64_t*>(k.kernelParams[2]), kN);
  CUDA_MEMSET_NODE_PARAMS ms;
  ASSERT_CU(cuGraphMemsetNodeGetParams(nodes[1], &ms));
  EXPECT_EQ(ms.dst, buf_);
  EXPECT_EQ(ms.elementSize, 1u);
  EXPECT_EQ(ms.width, 16u);
  EXPECT_EQ(ms.height, 1u);
  EXPECT_EQ(ms.value, 1u);
  CUDA_MEMCPY3D cp;
  ASSERT_CU(cuGraphMemcpyNodeGetParams(nodes[2], &cp));
  EXPECT_EQ(cp.srcMemoryType, CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(cp.srcDevice, buf_);
  EXPECT_EQ(cp.dstMemoryType, CU_MEMORYTYPE_HOST);
  EXPECT_EQ(cp.dstHost, host.data());
  EXPECT_EQ(cp.WidthInBytes, kN * 4);
  // Wrong node type.
  EXPECT_EQ(cuGraphKernelNodeGetParams(nodes[1], &k), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphMemsetNodeGetParams(nodes[0], &ms), CUDA_ERROR_INVALID_VALUE);

  Run(graph, 1, stream_);
  std::vector<uint32_t> want(kN, 42);
  for (int i = 0; i < 4; ++i) want[i] = 0x01010101u;
  EXPECT_EQ(host, want);
  ASSERT_CU(cuGraphDestroy(graph));
  CUgraphNodeType type;
  EXPECT_EQ(cuGraphNodeGetType(nodes[0], &type), CUDA_ERROR_INVALID_VALUE);  // gone with the graph
}

TEST_F(SimGraphTest, ExtraBufferLaunchIsCapturedAsAnExtraNode) {
  CUdeviceptr out;
  ASSERT_CU(cuMemAlloc(&out, sizeof(Mixed)));
  size_t offsets[5];
  for (size_t i = 0; i < 5; ++i)
    ASSERT_CU(cuFuncGetParamInfo(mixed_args(), i, &offsets[i], nullptr));
  unsigned char buffer[32] = {};
  const char c = 'g';
  const double d = 1.5;
  const int iv = 12;
  const short sv = 3;
  std::memcpy(buffer + offsets[0], &c, 1);
  std::memcpy(buffer + offsets[1], &d, 8);
  std::memcpy(buffer + offsets[2], &iv, 4);
  std::memcpy(buffer + offsets[3], &sv, 2);
  std::memcpy(buffer + offsets[4], &out, 8);
  size_t size = sizeof(buffer);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuLaunchKernel(mixed_args(), 1, 1, 1, 1, 1, 1, 0, stream_, nullptr, extra));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  std::memset(buffer, 0, sizeof(buffer));
  CUgraphNode node;
  size_t n = 1;
  ASSERT_CU(cuGraphGetNodes(graph, &node, &n));
  CUDA_KERNEL_NODE_PARAMS k;
  ASSERT_CU(cuGraphKernelNodeGetParams(node, &k));
  EXPECT_EQ(k.kernelParams, nullptr);
  ASSERT_NE(k.extra, nullptr);
  EXPECT_EQ(k.extra[0], CU_LAUNCH_PARAM_BUFFER_POINTER);
  EXPECT_EQ(k.extra[2], CU_LAUNCH_PARAM_BUFFER_SIZE);
  EXPECT_EQ(k.extra[4], CU_LAUNCH_PARAM_END);
  EXPECT_GE(*static_cast<size_t*>(k.extra[3]), offsets[4] + 8);
  CUdeviceptr recorded;
  std::memcpy(&recorded, static_cast<unsigned char*>(k.extra[1]) + offsets[4], 8);
  EXPECT_EQ(recorded, out);
  Run(graph, 1, stream_);
  Mixed m = {};
  ASSERT_CU(cuMemcpyDtoH(&m, out, sizeof(m)));
  EXPECT_EQ(m.c, 'g');
  EXPECT_EQ(m.d, 1.5);
  EXPECT_EQ(m.i, 12);
  EXPECT_EQ(m.s, 3);
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(out));
}

void CountCall(void* user) { static_cast<std::atomic<int>*>(user)->fetch_add(1); }

TEST_F(SimGraphTest, ExplicitlyBuiltGraphRunsInDependencyOrder) {
  CUgraph graph;
  ASSERT_CU(cuGraphCreate(&graph, 0));
  CUdeviceptr sum;
  ASSERT_CU(cuMemAlloc(&sum, 8));
  uint32_t value = 3;
  uint64_t count = kN;
  CUDA_KERNEL_NODE_PARAMS fill_params = {};
  void* fill_args[] = {&buf_, &value, &count};
  fill_params.func = fill();
  fill_params.gridDimX = fill_params.gridDimY = fill_params.gridDimZ = 1;
  fill_params.blockDimX = fill_params.blockDimY = fill_params.blockDimZ = 1;
  fill_params.kernelParams = fill_args;
  CUgraphNode fill_node, memset_node, sum_node, copy_node, host_node, empty_node;
  ASSERT_CU(cuGraphAddKernelNode(&fill_node, graph, nullptr, 0, &fill_params));
  CUDA_MEMSET_NODE_PARAMS ms = {};
  ms.dst = buf_;
  ms.value = 1;
  ms.elementSize = 4;
  ms.width = 10;
  ms.height = 1;
  ASSERT_CU(cuGraphAddMemsetNode(&memset_node, graph, &fill_node, 1, &ms, ctx_));
  CUDA_KERNEL_NODE_PARAMS sum_params = fill_params;
  void* sum_args[] = {&buf_, &count, &sum};
  sum_params.func = sum_u32();
  sum_params.kernelParams = sum_args;
  ASSERT_CU(cuGraphAddKernelNode(&sum_node, graph, &memset_node, 1, &sum_params));
  uint64_t host_sum = 0;
  CUDA_MEMCPY3D cp = {};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = sum;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstHost = &host_sum;
  cp.WidthInBytes = 8;
  cp.Height = 1;
  cp.Depth = 1;
  ASSERT_CU(cuGraphAddMemcpyNode(&copy_node, graph, &sum_node, 1, &cp, ctx_));
  std::atomic<int> calls{0};
  CUDA_HOST_NODE_PARAMS hp = {&CountCall, &calls};
  ASSERT_CU(cuGraphAddHostNode(&host_node, graph, &copy_node, 1, &hp));
  const CUgraphNode both[] = {memset_node, host_node};
  ASSERT_CU(cuGraphAddEmptyNode(&empty_node, graph, both, 2));
  value = 1000;  // copied when the node was added

  size_t ndeps = 0;
  ASSERT_CU(cuGraphNodeGetDependencies(empty_node, nullptr, nullptr, &ndeps));
  EXPECT_EQ(ndeps, 2u);
  CUgraphNode root;
  size_t nroots = 1;
  ASSERT_CU(cuGraphGetRootNodes(graph, &root, &nroots));
  EXPECT_EQ(root, fill_node);
  CUDA_HOST_NODE_PARAMS hp_back;
  ASSERT_CU(cuGraphHostNodeGetParams(host_node, &hp_back));
  EXPECT_EQ(hp_back.fn, &CountCall);
  EXPECT_EQ(hp_back.userData, &calls);

  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiateWithFlags(&exec, graph, 0));
  for (int i = 0; i < 2; ++i) ASSERT_CU(cuGraphLaunch(exec, stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(host_sum, 10u * 1 + (kN - 10) * 3);
  EXPECT_EQ(calls.load(), 2);
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuMemFree(sum));
}

TEST_F(SimGraphTest, HostFunctionsAreCapturedAndRunPerLaunch) {
  std::atomic<int> calls{0};
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuLaunchHostFunc(stream_, &CountCall, &calls));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  ASSERT_CU(cuStreamSynchronize(stream_));
  EXPECT_EQ(calls.load(), 0);
  Run(graph, 3, stream_);
  EXPECT_EQ(calls.load(), 3);
  ASSERT_CU(cuGraphDestroy(graph));
}

TEST_F(SimGraphTest, CaptureInfoReportsTheGraphAndItsFrontier) {
  CUstreamCaptureStatus status;
  cuuint64_t id1 = 0, id2 = 0;
  CUgraph live = nullptr;
  const CUgraphNode* deps = nullptr;
  const CUgraphEdgeData* edges = nullptr;
  size_t ndeps = 99;
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, &id1, &live, &deps, &edges, &ndeps));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, &id1, &live, &deps, nullptr, &ndeps));
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(live, nullptr);
  EXPECT_EQ(ndeps, 0u);
  ASSERT_CU(Launch(no_args(), stream_));
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, &id2, nullptr, &deps, &edges, &ndeps));
  EXPECT_EQ(id2, id1);
  ASSERT_EQ(ndeps, 1u);
  ASSERT_NE(edges, nullptr);
  EXPECT_EQ(edges[0].type, 0);
  CUgraphNodeType type;
  ASSERT_CU(cuGraphNodeGetType(deps[0], &type));
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  EXPECT_EQ(cuStreamGetCaptureInfo(stream_, &status, nullptr, nullptr, nullptr, &edges, nullptr),
            CUDA_ERROR_INVALID_VALUE);  // edge data requires the dependency array
  // The capture graph may not be destroyed or instantiated before the capture ends.
  CUgraphExec exec;
  EXPECT_EQ(cuGraphDestroy(live), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiate(&exec, live, 0), CUDA_ERROR_INVALID_VALUE);
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  EXPECT_EQ(graph, live);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuStreamGetCaptureInfo(stream_, &status, &id2, nullptr, nullptr, nullptr, nullptr));
  EXPECT_NE(id2, id1);  // unique per capture sequence
  CUgraph second;
  ASSERT_CU(cuStreamEndCapture(stream_, &second));
  ASSERT_CU(cuGraphDestroy(second));
  ASSERT_CU(cuGraphDestroy(graph));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
}

TEST_F(SimGraphTest, CaptureRulesAndErrors) {
  CUgraph graph = reinterpret_cast<CUgraph>(1);
  // Capture may not begin on the legacy stream, nor twice, nor end without beginning.
  EXPECT_EQ(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture(stream_, static_cast<CUstreamCaptureMode>(7)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_ILLEGAL_STATE);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  // Synchronizing a capturing stream is illegal and invalidates the capture.
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(Launch(no_args(), stream_), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);  // usable again
  ASSERT_CU(cuStreamSynchronize(stream_));

  // A failing launch during capture invalidates it too; so does a query.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuLaunchKernel(no_args(), 0, 1, 1, 1, 1, 1, 0, stream_, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // The per-thread default stream can be captured; a synchronous copy on it cannot.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  ASSERT_CU(cuGetProcAddress("cuMemcpyHtoD", &fn, 13000,
                             CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &found));
  auto htod_ptds = reinterpret_cast<CUresult (*)(CUdeviceptr, const void*, size_t)>(fn);
  ASSERT_CU(cuStreamBeginCapture(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_GLOBAL));
  uint32_t word = 1;
  ASSERT_CU(cuMemcpyHtoDAsync(buf_, &word, 4, CU_STREAM_PER_THREAD));
  EXPECT_EQ(Status(CU_STREAM_PER_THREAD), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(htod_ptds(buf_, &word, 4), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(CU_STREAM_PER_THREAD, &graph),
            CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(Read(buf_, 1)[0], 0u);  // nothing ran

  // Operations the sim does not capture fail with NOT_SUPPORTED and invalidate (waits on events
  // are in cross_stream_capture_test.cc).
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p;
  EXPECT_EQ(cuMemAllocAsync(&p, 64, stream_), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuStreamEndCapture(stream_, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  // Destroying a capturing stream ends the capture.
  CUstream doomed;
  ASSERT_CU(cuStreamCreate(&doomed, 0));
  ASSERT_CU(cuStreamBeginCapture(doomed, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(cuStreamDestroy(doomed));
  ASSERT_CU(Launch(no_args(), nullptr));  // the legacy stream is usable again
  ASSERT_CU(cuCtxSynchronize());
}

TEST_F(SimGraphTest, LegacyStreamIsUnusableWhileABlockingStreamCaptures) {
  CUstream blocking;
  ASSERT_CU(cuStreamCreate(&blocking, 0));
  ASSERT_CU(cuStreamBeginCapture(blocking, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status;
  // A query is refused without invalidating the capture ...
  EXPECT_EQ(cuStreamIsCapturing(CU_STREAM_LEGACY, &status), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(Status(blocking), CU_STREAM_CAPTURE_STATUS_ACTIVE);
  // ... a non-blocking stream is unaffected ...
  ASSERT_CU(Launch(no_args(), stream_));
  ASSERT_CU(cuStreamSynchronize(stream_));
  // ... and work on the legacy stream is refused and invalidates the capture.
  EXPECT_EQ(Launch(no_args(), nullptr), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(Status(blocking), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph graph;
  EXPECT_EQ(cuStreamEndCapture(blocking, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  ASSERT_CU(Launch(no_args(), nullptr));
  ASSERT_CU(cuStreamSynchronize(nullptr));
  ASSERT_CU(cuStreamDestroy(blocking));
}

TEST_F(SimGraphTest, EndCaptureFromAnotherThreadNeedsRelaxedMode) {
  for (CUstreamCaptureMode mode : {CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_RELAXED}) {
    ASSERT_CU(cuStreamBeginCapture(stream_, mode));
    CUresult r = CUDA_ERROR_UNKNOWN;
    CUgraph graph = nullptr;
    std::thread other([&] {
      cuCtxSetCurrent(ctx_);
      r = cuStreamEndCapture(stream_, &graph);
    });
    other.join();
    if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) {
      EXPECT_EQ(r, CUDA_SUCCESS);
    } else {
      EXPECT_EQ(r, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
      ASSERT_CU(cuStreamEndCapture(stream_, &graph));
    }
    ASSERT_CU(cuGraphDestroy(graph));
  }
}

TEST_F(SimGraphTest, GraphApiErrors) {
  CUgraph graph, other;
  EXPECT_EQ(cuGraphCreate(&graph, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphCreate(&graph, 0));
  ASSERT_CU(cuGraphCreate(&other, 0));
  CUgraphNode a, b, foreign;
  ASSERT_CU(cuGraphAddEmptyNode(&a, graph, nullptr, 0));
  ASSERT_CU(cuGraphAddEmptyNode(&foreign, other, nullptr, 0));
  EXPECT_EQ(cuGraphAddEmptyNode(&b, graph, &foreign, 1), CUDA_ERROR_INVALID_VALUE);
  const CUgraphNode twice[] = {a, a};
  EXPECT_EQ(cuGraphAddEmptyNode(&b, graph, twice, 2), CUDA_ERROR_INVALID_VALUE);
  CUDA_KERNEL_NODE_PARAMS k = {};
  k.func = fill();
  k.gridDimX = k.gridDimY = k.gridDimZ = k.blockDimX = k.blockDimY = k.blockDimZ = 1;
  EXPECT_EQ(cuGraphAddKernelNode(&b, graph, nullptr, 0, &k), CUDA_ERROR_INVALID_VALUE);  // no args
  k.func = no_args();
  k.gridDimX = 0;
  EXPECT_EQ(cuGraphAddKernelNode(&b, graph, nullptr, 0, &k), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMSET_NODE_PARAMS ms = {};
  ms.dst = buf_;
  ms.elementSize = 3;
  ms.width = ms.height = 1;
  EXPECT_EQ(cuGraphAddMemsetNode(&b, graph, nullptr, 0, &ms, ctx_), CUDA_ERROR_INVALID_VALUE);
  CUDA_MEMCPY3D cp = {};
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.srcDevice = buf_;
  cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.dstDevice = buf_ + 4 * kN;  // past the allocation
  cp.WidthInBytes = 4;
  cp.Height = cp.Depth = 1;
  EXPECT_EQ(cuGraphAddMemcpyNode(&b, graph, nullptr, 0, &cp, ctx_), CUDA_ERROR_INVALID_VALUE);
  cp.dstDevice = buf_;
  cp.Depth = 2;
  EXPECT_EQ(cuGraphAddMemcpyNode(&b, graph, nullptr, 0, &cp, ctx_), CUDA_ERROR_NOT_SUPPORTED);

  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(cuGraphExecUpdate(exec, graph, nullptr), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuGraphInstantiate(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphLaunch(exec, stream_));  // an empty graph
  ASSERT_CU(cuStreamSynchronize(stream_));
  ASSERT_CU(cuGraphExecDestroy(exec));
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(exec), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuGraphDestroy(other));
  EXPECT_EQ(cuGraphDestroy(graph), CUDA_ERROR_INVALID_VALUE);
  size_t n = 0;
  EXPECT_EQ(cuGraphGetNodes(graph, nullptr, &n), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddEmptyNode(&b, graph, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimGraphTest, LaunchesOfOneExecutableGraphAreOrdered) {
  int* flag;
  uint32_t* marker;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&flag), sizeof(int)));
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&marker), sizeof(uint32_t)));
  *flag = 0;
  *marker = 0;
  CUstream a, b;
  ASSERT_CU(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
  WorkerProbe probe;
  ASSERT_CU(probe.Enqueue(b));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Launch(wait_flag(), stream_, reinterpret_cast<CUdeviceptr>(flag)));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuGraphLaunch(exec, a));  // blocks stream a until the flag is set
  ASSERT_CU(cuGraphLaunch(exec, b));  // must wait for the launch on a
  ASSERT_CU(Launch(write_u32(), b, reinterpret_cast<CUdeviceptr>(marker), 1u));
  probe.Open();
  // Once b's worker has done all it can (Note [waiting for a blocked thread]), nothing of b's
  // has run.
  ASSERT_TRUE(probe.WaitBlockedAfter());
  EXPECT_EQ(__atomic_load_n(marker, __ATOMIC_ACQUIRE), 0u);
  EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  ASSERT_CU(cuStreamSynchronize(b));
  EXPECT_EQ(*marker, 1u);
  ASSERT_CU(cuStreamSynchronize(a));
  ASSERT_CU(cuGraphExecDestroy(exec));
  ASSERT_CU(cuGraphDestroy(graph));
  ASSERT_CU(cuStreamDestroy(a));
  ASSERT_CU(cuStreamDestroy(b));
  ASSERT_CU(cuMemFreeHost(flag));
  ASSERT_CU(cuMemFreeHost(marker));
}

TEST_F(SimGraphTest, FaultInAGraphKernelMakesTheContextSticky) {
  CUdeviceptr doomed;
  ASSERT_CU(cuMemAlloc(&doomed, 4096));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Launch(write_u32(), stream_, doomed, 5u));
  CUgraph graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &graph));
  CUgraphExec exec;
  ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
  ASSERT_CU(cuMemFree(doomed));  // the graph now refers to unmapped memory
  // The launch itself may already report the fault (errors of asynchronous work).
  const CUresult launched = cuGraphLaunch(exec, stream_);
  EXPECT_TRUE(launched == CUDA_SUCCESS || launched == CUDA_ERROR_ILLEGAL_ADDRESS) << launched;
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuGraphLaunch(exec, stream_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_CU(cuGraphExecDestroy(exec));
  EXPECT_CU(cuGraphDestroy(graph));
}

TEST_F(SimGraphTest, ConcurrentCapturesAndLaunchesFromManyThreads) {
  constexpr int kThreads = 4, kLaunches = 20;
  CUdeviceptr slots;
  ASSERT_CU(cuMemAlloc(&slots, kThreads * 4));
  ASSERT_CU(cuMemsetD32(slots, 0, kThreads));
  CUdeviceptr counter;
  ASSERT_CU(cuMemAlloc(&counter, 4));
  ASSERT_CU(cuMemsetD32(counter, 0, 1));
  CUdeviceptr order;
  ASSERT_CU(cuMemAlloc(&order, kThreads * kLaunches * 4));
  // One shared executable graph launched from every thread, each on its own stream.
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  ASSERT_CU(Launch(record_order(), stream_, counter, order, 1u));
  CUgraph shared_graph;
  ASSERT_CU(cuStreamEndCapture(stream_, &shared_graph));
  CUgraphExec shared_exec;
  ASSERT_CU(cuGraphInstantiate(&shared_exec, shared_graph, 0));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_CU(cuCtxSetCurrent(ctx_));
      CUstream s;
      ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
      const CUdeviceptr slot = slots + 4 * t;
      ASSERT_CU(cuMemsetD32Async(slot, 0, 1, s));
      ASSERT_CU(Launch(fill(), s, slot, static_cast<uint32_t>(t + 1), static_cast<uint64_t>(1)));
      CUgraph graph;
      ASSERT_CU(cuStreamEndCapture(s, &graph));
      CUgraphExec exec;
      ASSERT_CU(cuGraphInstantiate(&exec, graph, 0));
      for (int i = 0; i < kLaunches; ++i) {
        ASSERT_CU(cuGraphLaunch(exec, s));
        ASSERT_CU(cuGraphLaunch(shared_exec, s));
      }
      ASSERT_CU(cuStreamSynchronize(s));
      ASSERT_CU(cuGraphExecDestroy(exec));
      ASSERT_CU(cuGraphDestroy(graph));
      ASSERT_CU(cuStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_CU(cuCtxSynchronize());
  std::vector<uint32_t> back = Read(slots, kThreads);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(back[t], static_cast<uint32_t>(t + 1));
  EXPECT_EQ(Read(counter, 1)[0], static_cast<uint32_t>(kThreads * kLaunches));
  ASSERT_CU(cuGraphExecDestroy(shared_exec));
  ASSERT_CU(cuGraphDestroy(shared_graph));
  for (CUdeviceptr p : {slots, counter, order}) ASSERT_CU(cuMemFree(p));
}

}  // namespace
}  // namespace memsim_test

// Stream-capture interaction modes (Note [capture modes] in sim/src/capture_mode.h): which
// "potentially unsafe" calls a capture in progress prohibits, per the documentation of
// cuStreamBeginCapture and cuThreadExchangeStreamCaptureMode. Part of memsim_graph_test.
#include <thread>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

class SimCaptureModeTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventCreate(&event_, CU_EVENT_DEFAULT));
  }
  void TearDown() override {
    if (event_ != nullptr) cuEventDestroy(event_);
    if (stream_ != nullptr) cuStreamDestroy(stream_);
    SimTest::TearDown();
  }
  // Runs `call` on a new thread whose capture mode is `mode`, with this test's context current.
  template <typename F>
  CUresult OnOtherThread(CUstreamCaptureMode mode, F call) {
    CUresult result = CUDA_ERROR_UNKNOWN;
    std::thread t([&] {
      if (cuCtxSetCurrent(ctx_) != CUDA_SUCCESS) return;
      CUstreamCaptureMode m = mode;
      if (cuThreadExchangeStreamCaptureMode(&m) != CUDA_SUCCESS) return;
      result = call();
    });
    t.join();
    return result;
  }
  static CUresult AllocAndFree() {
    CUdeviceptr p;
    if (CUresult r = cuMemAlloc(&p, 4096)) return r;
    return cuMemFree(p);
  }
  // Ends the capture of stream_; returns its result (destroying a graph it produced).
  CUresult EndCapture() {
    CUgraph graph = nullptr;
    const CUresult r = cuStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cuGraphDestroy(graph);
    return r;
  }

  CUstream stream_ = nullptr;
  CUevent event_ = nullptr;
};

TEST_F(SimCaptureModeTest, GlobalCaptureProhibitsUnsafeCallsOfEveryGlobalModeThread) {
  ASSERT_CU(cuEventRecord(event_, nullptr));
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_EQ(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, AllocAndFree),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return cuEventQuery(event_); }),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, [] { return cuCtxSynchronize(); }),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  uint32_t v = 0;
  EXPECT_EQ(cuMemcpyDtoH(&v, 0, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // own thread
  EXPECT_EQ(EndCapture(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_CU(AllocAndFree());  // no capture in progress any more
}

TEST_F(SimCaptureModeTest, ThreadLocalCaptureProhibitsOnlyTheCapturingThread) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  EXPECT_CU(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, AllocAndFree));
  EXPECT_CU(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, [&] { return cuStreamQuery(nullptr); }));
  EXPECT_CU(EndCapture());  // other threads did not invalidate it
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(EndCapture(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

TEST_F(SimCaptureModeTest, ThreadLocalModeIgnoresOtherThreadsGlobalCaptures) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(OnOtherThread(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, AllocAndFree));
  EXPECT_CU(EndCapture());
}

TEST_F(SimCaptureModeTest, RelaxedModeAndRelaxedCapturesProhibitNothing) {
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT_CU(OnOtherThread(CU_STREAM_CAPTURE_MODE_RELAXED, AllocAndFree));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  EXPECT_CU(AllocAndFree());  // the capturing thread itself, in relaxed mode
  ASSERT_CU(cuThreadExchangeStreamCaptureMode(&mode));  // back to global
  EXPECT_CU(EndCapture());
  ASSERT_CU(cuStreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_CU(AllocAndFree());
  EXPECT_CU(OnOtherThread(CU_STREAM_CAPTURE_MODE_GLOBAL, AllocAndFree));
  EXPECT_CU(EndCapture());
}

}  // namespace
}  // namespace memsim_test

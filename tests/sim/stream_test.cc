// Streams, events, cross-stream waits and the legacy default stream, per the CUDA documentation.
// Kernels that spin on a host flag make "not finished yet" deterministic (no timing).
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"}});

class SimStreamTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&flag_), sizeof(int)));
    *flag_ = 0;
    ASSERT_CU(cuMemAlloc(&counter_, 4));
    ASSERT_CU(cuMemAlloc(&order_, 1024 * 4));
    ASSERT_CU(cuMemsetD32(counter_, 0, 1));
    ASSERT_CU(cuStreamCreate(&reader_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    Release();
    cuCtxSynchronize();
    cuStreamDestroy(reader_);
    cuMemFreeHost(flag_);
    SimTest::TearDown();
  }
  // Blocks the stream until Release().
  CUresult Block(CUstream s) {
    return Launch(wait_flag(), s, reinterpret_cast<CUdeviceptr>(flag_));
  }
  void Release() { __atomic_store_n(flag_, 1, __ATOMIC_RELEASE); }
  CUresult Tag(CUstream s, uint32_t tag) {
    return Launch(record_order(), s, counter_, order_, tag);
  }
  // Two non-blocking streams and an event without timing, for cross-stream ordering tests.
  void CreateStreamPairAndEvent(CUstream* a, CUstream* b, CUevent* e) {
    ASSERT_CU(cuStreamCreate(a, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(b, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuEventCreate(e, CU_EVENT_DISABLE_TIMING));
  }
  void DestroyStreamPairAndEvent(CUstream a, CUstream b, CUevent e) {
    ASSERT_CU(cuEventDestroy(e));
    ASSERT_CU(cuStreamDestroy(a));
    ASSERT_CU(cuStreamDestroy(b));
  }
  // Reads the recorded order through a non-blocking stream, so that reading never waits for
  // (or is ordered with) the streams under test.
  std::vector<uint32_t> Order() {
    uint32_t n = 0;
    EXPECT_CU(cuMemcpyDtoHAsync(&n, counter_, 4, reader_));
    EXPECT_CU(cuStreamSynchronize(reader_));
    std::vector<uint32_t> v(n);
    if (n > 0) {
      EXPECT_CU(cuMemcpyDtoHAsync(v.data(), order_, n * 4, reader_));
      EXPECT_CU(cuStreamSynchronize(reader_));
    }
    return v;
  }

  int* flag_ = nullptr;
  CUdeviceptr counter_ = 0;
  CUdeviceptr order_ = 0;
  CUstream reader_ = nullptr;
};

TEST_F(SimStreamTest, WorkInOneStreamRunsInIssueOrder) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (uint32_t i = 0; i < 200; ++i) ASSERT_CU(Tag(s, i));
  ASSERT_CU(cuStreamSynchronize(s));
  auto order = Order();
  ASSERT_EQ(order.size(), 200u);
  for (uint32_t i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
  ASSERT_CU(cuStreamDestroy(s));
}

TEST_F(SimStreamTest, AsyncCallsReturnBeforeTheWorkRuns) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(Block(s));
  std::vector<uint32_t> host(1024, 1);
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  ASSERT_CU(cuMemsetD32Async(d, 9, 1024, s));
  ASSERT_CU(cuMemcpyDtoHAsync(host.data(), d, 4096, s));  // returns while the stream is blocked
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(host[0], 1u);
  Release();
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(host[1023], 9u);
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(cuStreamDestroy(s));
}

TEST_F(SimStreamTest, EventQueryIsNotReadyBeforeAndSuccessAfterCompletion) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent e;
  ASSERT_CU(cuEventCreate(&e, CU_EVENT_DEFAULT));
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);  // never recorded: complete
  ASSERT_CU(Block(s));
  ASSERT_CU(cuEventRecord(e, s));
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  Release();
  ASSERT_CU(cuEventSynchronize(e));
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  ASSERT_CU(cuEventDestroy(e));
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_CU(cuStreamDestroy(s));
}

TEST_F(SimStreamTest, StreamWaitEventOrdersWorkAcrossStreams) {
  CUstream a, b;
  CUevent e;
  ASSERT_NO_FATAL_FAILURE(CreateStreamPairAndEvent(&a, &b, &e));
  WorkerProbe probe;
  ASSERT_CU(probe.Enqueue(b));
  ASSERT_CU(Block(a));
  ASSERT_CU(Tag(a, 1));
  ASSERT_CU(cuEventRecord(e, a));
  ASSERT_CU(cuStreamWaitEvent(b, e, 0));
  ASSERT_CU(Tag(b, 2));
  probe.Open();
  // b must not pass the wait while a is blocked: once b's worker has done all it can
  // (Note [waiting for a blocked thread]), nothing of b's has run.
  ASSERT_TRUE(probe.WaitBlockedAfter());
  EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
  EXPECT_TRUE(Order().empty());
  Release();
  ASSERT_CU(cuStreamSynchronize(b));
  EXPECT_EQ(Order(), (std::vector<uint32_t>{1, 2}));
  ASSERT_NO_FATAL_FAILURE(DestroyStreamPairAndEvent(a, b, e));
}

TEST_F(SimStreamTest, WaitEventCapturesTheRecordAtCallTime) {
  CUstream a, b;
  CUevent e;
  ASSERT_NO_FATAL_FAILURE(CreateStreamPairAndEvent(&a, &b, &e));
  ASSERT_CU(cuEventRecord(e, a));  // completes immediately (a is idle)
  ASSERT_CU(cuEventSynchronize(e));
  ASSERT_CU(cuStreamWaitEvent(b, e, 0));  // refers to the completed record
  ASSERT_CU(Block(a));
  ASSERT_CU(cuEventRecord(e, a));  // re-record after the wait was enqueued
  ASSERT_CU(Tag(b, 5));
  ASSERT_CU(cuStreamSynchronize(b));  // must not wait for the later record
  EXPECT_EQ(Order(), std::vector<uint32_t>{5});
  Release();
  ASSERT_CU(cuStreamSynchronize(a));
  ASSERT_NO_FATAL_FAILURE(DestroyStreamPairAndEvent(a, b, e));
}

TEST_F(SimStreamTest, LegacyDefaultStreamWaitsForBlockingStreams) {
  CUstream blocking;
  ASSERT_CU(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
  WorkerProbe probe;  // on the NULL stream first: it waits for nothing
  ASSERT_CU(probe.Enqueue(nullptr));
  ASSERT_CU(Block(blocking));
  ASSERT_CU(Tag(blocking, 1));
  ASSERT_CU(Tag(nullptr, 2));   // NULL stream: waits for prior work in blocking streams
  ASSERT_CU(Tag(blocking, 3));  // and later blocking-stream work waits for it
  probe.Open();
  // Note [waiting for a blocked thread]: the legacy stream's worker has done all it can.
  ASSERT_TRUE(probe.WaitBlockedAfter());
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
  EXPECT_TRUE(Order().empty());
  Release();
  ASSERT_CU(cuStreamSynchronize(blocking));
  EXPECT_EQ(Order(), (std::vector<uint32_t>{1, 2, 3}));
  ASSERT_CU(cuStreamDestroy(blocking));
}

TEST_F(SimStreamTest, NonBlockingStreamsDoNotSynchronizeWithTheLegacyStream) {
  CUstream nb;
  ASSERT_CU(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
  ASSERT_CU(Block(nb));
  ASSERT_CU(Tag(nullptr, 7));
  ASSERT_CU(cuStreamSynchronize(nullptr));  // completes although nb is still blocked
  EXPECT_EQ(Order(), std::vector<uint32_t>{7});
  EXPECT_EQ(cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
  Release();
  ASSERT_CU(cuStreamSynchronize(nb));
  ASSERT_CU(cuStreamDestroy(nb));
}

TEST_F(SimStreamTest, SynchronousCopyIsOrderedAfterBlockingStreamWork) {
  CUstream blocking;
  ASSERT_CU(cuStreamCreate(&blocking, 0));
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  ASSERT_CU(cuMemsetD32(d, 0, 1024));
  ASSERT_CU(Block(blocking));
  ASSERT_CU(Launch(fill(), blocking, d, 123u, static_cast<uint64_t>(1024)));
  // Released once this thread is blocked in the copy (Note [waiting for a blocked thread]): a
  // copy that did not wait for the fill would read the memset's 0.
  const pid_t copier = ThisThreadId();
  std::thread releaser([this, copier] {
    EXPECT_TRUE(WaitUntilSleeping(copier));
    Release();
  });
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, d + 4092, 4));  // legacy-stream sync copy waits for the fill
  EXPECT_EQ(back, 123u);
  releaser.join();
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(cuStreamDestroy(blocking));
}

TEST_F(SimStreamTest, PerThreadDefaultStreamsAreIndependentOfEachOther) {
  // (Both per-thread streams are blocking streams: the legacy stream would wait for them.)
  CUstream mine = CU_STREAM_PER_THREAD;
  ASSERT_CU(Block(mine));
  std::thread other([this] {
    ASSERT_CU(cuCtxSetCurrent(ctx_));
    // Another thread's per-thread stream is not blocked by this thread's one.
    ASSERT_CU(Tag(CU_STREAM_PER_THREAD, 4));
    ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  });
  other.join();
  EXPECT_EQ(Order(), std::vector<uint32_t>{4});
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  Release();
  ASSERT_CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
}

std::atomic<int> g_callback_value{0};

void CUDA_CB HostFn(void* user) {
  g_callback_value.store(*static_cast<int*>(user) * 10 + g_callback_value.load());
}

void CUDA_CB Callback(CUstream, CUresult status, void* user) {
  if (status == CUDA_SUCCESS)
    g_callback_value.store(g_callback_value.load() * 10 + *static_cast<int*>(user));
}

TEST_F(SimStreamTest, HostFunctionsAndCallbacksRunInStreamOrder) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  g_callback_value = 0;
  int one = 1, two = 2;
  ASSERT_CU(Block(s));
  ASSERT_CU(cuLaunchHostFunc(s, HostFn, &one));          // value = 10
  ASSERT_CU(cuStreamAddCallback(s, Callback, &two, 0));  // value = 102
  EXPECT_EQ(g_callback_value.load(), 0);
  Release();
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_EQ(g_callback_value.load(), 102);
  ASSERT_CU(cuStreamDestroy(s));
}

// The elapsed time is the time between the two events' completions: bracketed by what the host
// observed, causally, without a sleep. `start` completed before the host saw it complete, and
// `stop` after the host released the kernel it waits behind; both completed after the host
// recorded `start` and before it saw `stop` complete. (The sim's event clock is steady_clock.)
TEST_F(SimStreamTest, ElapsedTimeNeedsTimedCompletedEvents) {
  using Clock = std::chrono::steady_clock;
  auto ms_between = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<float, std::milli>(b - a).count();
  };
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent start, stop, untimed;
  ASSERT_CU(cuEventCreate(&start, 0));
  ASSERT_CU(cuEventCreate(&stop, 0));
  ASSERT_CU(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  float ms = -1;
  EXPECT_EQ(cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_INVALID_HANDLE);  // not recorded
  const Clock::time_point before_start = Clock::now();
  ASSERT_CU(cuEventRecord(start, s));
  ASSERT_CU(Block(s));
  ASSERT_CU(cuEventRecord(stop, s));
  ASSERT_CU(cuEventRecord(untimed, s));
  ASSERT_CU(cuEventSynchronize(start));
  const Clock::time_point start_seen = Clock::now();
  EXPECT_EQ(cuEventElapsedTime(&ms, start, stop), CUDA_ERROR_NOT_READY);  // stop is held
  EXPECT_EQ(cuEventQuery(stop), CUDA_ERROR_NOT_READY);
  const Clock::time_point released = Clock::now();
  Release();
  ASSERT_CU(cuEventSynchronize(stop));
  const Clock::time_point stop_seen = Clock::now();
  ASSERT_CU(cuEventElapsedTime(&ms, start, stop));
  // Clock readings convert to float milliseconds: a rounding margin, not a timing allowance.
  constexpr float kRounding = 1e-3f;
  EXPECT_GE(ms, ms_between(start_seen, released) - kRounding);  // held at least that long
  EXPECT_LE(ms, ms_between(before_start, stop_seen) + kRounding);
  EXPECT_GT(ms, 0.0f);
  EXPECT_EQ(cuEventElapsedTime(&ms, start, untimed), CUDA_ERROR_INVALID_HANDLE);
  for (CUevent e : {start, stop, untimed}) ASSERT_CU(cuEventDestroy(e));
  ASSERT_CU(cuStreamDestroy(s));
}

TEST_F(SimStreamTest, StreamPropertiesAndInvalidHandles) {
  CUstream s;
  ASSERT_CU(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
  unsigned flags = 0;
  int prio = 0;
  CUcontext c = nullptr;
  ASSERT_CU(cuStreamGetFlags(s, &flags));
  ASSERT_CU(cuStreamGetPriority(s, &prio));
  ASSERT_CU(cuStreamGetCtx(s, &c));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(prio, -1);
  EXPECT_EQ(c, ctx_);
  CUstreamCaptureStatus cap;
  ASSERT_CU(cuStreamIsCapturing(s, &cap));
  EXPECT_EQ(cap, CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));  // graph_test.cc has more
  ASSERT_CU(cuStreamIsCapturing(s, &cap));
  EXPECT_EQ(cap, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  ASSERT_CU(cuStreamDestroy(s));  // ends the capture
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamCreate(&s, 0x80), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimStreamTest, ManyThreadsSubmittingConcurrentlyKeepPerStreamOrder) {
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<CUstream> streams(kThreads);
  for (auto& s : streams) ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr slots;
  ASSERT_CU(cuMemAlloc(&slots, kThreads * 4));
  ASSERT_CU(cuMemsetD32(slots, 0, kThreads));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ASSERT_CU(cuCtxSetCurrent(ctx_));
      for (int i = 0; i < kPerThread; ++i) {
        // Each launch overwrites the slot; in-order execution leaves the last value.
        ASSERT_CU(Launch(fill(), streams[t], slots + 4 * t, static_cast<uint32_t>(i),
                         static_cast<uint64_t>(1)));
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_CU(cuCtxSynchronize());
  std::vector<uint32_t> back(kThreads);
  ASSERT_CU(cuMemcpyDtoH(back.data(), slots, kThreads * 4));
  for (uint32_t v : back) EXPECT_EQ(v, static_cast<uint32_t>(kPerThread - 1));
  for (auto& s : streams) ASSERT_CU(cuStreamDestroy(s));
  ASSERT_CU(cuMemFree(slots));
}

}  // namespace
}  // namespace memsim_test

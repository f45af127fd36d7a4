// Stream memory operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64,
// cuStreamBatchMemOp): values, the wait conditions, stream order, documented validation and
// the strictness of Note [stream memory operations]. Part of memsim_memop_test.
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kChunk = 2u << 20;

class SimStreamMemOpTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuStreamCreate(&t_, CU_STREAM_NON_BLOCKING));
    ASSERT_CU(cuMemAlloc(&dev_words_, 64));
    ASSERT_CU(cuMemsetD8(dev_words_, 0, 64));
    ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&host_words_), 64));
    std::memset(host_words_, 0, 64);
  }
  void TearDown() override {
    if (s_ != nullptr) cuStreamDestroy(s_);
    if (t_ != nullptr) cuStreamDestroy(t_);
    if (dev_words_ != 0) cuMemFree(dev_words_);
    if (host_words_ != nullptr) cuMemFreeHost(host_words_);
    SimTest::TearDown();
  }
  CUdeviceptr HostWord(int i) { return reinterpret_cast<CUdeviceptr>(&host_words_[i]); }

  CUstream s_ = nullptr, t_ = nullptr;
  CUdeviceptr dev_words_ = 0;
  uint64_t* host_words_ = nullptr;
};

TEST_F(SimStreamMemOpTest, WritesStoreTheirValuesInStreamOrder) {
  ASSERT_CU(cuStreamWriteValue32(s_, dev_words_, 0xdeadbeefu, 0));
  ASSERT_CU(cuStreamWriteValue64(s_, dev_words_ + 8, 0x0123456789abcdefull,
                                 CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
  ASSERT_CU(cuMemsetD32Async(dev_words_ + 16, 7, 1, s_));
  ASSERT_CU(cuStreamWriteValue32(s_, dev_words_ + 16, 9, 0));  // after the memset
  ASSERT_CU(cuStreamWriteValue32(s_, HostWord(3), 5, 0));      // page-locked host memory
  ASSERT_CU(cuStreamSynchronize(s_));
  uint32_t back[6];
  ASSERT_CU(cuMemcpyDtoH(back, dev_words_, sizeof(back)));
  EXPECT_EQ(back[0], 0xdeadbeefu);
  EXPECT_EQ(back[2] | (uint64_t{back[3]} << 32), 0x0123456789abcdefull);
  EXPECT_EQ(back[4], 9u);
  EXPECT_EQ(host_words_[3], 5u);
}

TEST_F(SimStreamMemOpTest, WaitHoldsTheStreamUntilTheHostWritesTheValue) {
  ASSERT_CU(cuStreamWaitValue32(s_, HostWord(0), 5, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_CU(cuStreamWriteValue32(s_, dev_words_, 1, 0));
  EXPECT_EQ(cuStreamQuery(s_), CUDA_ERROR_NOT_READY);  // 0 < 5: nothing behind the wait ran
  __atomic_store_n(reinterpret_cast<uint32_t*>(&host_words_[0]), 6u, __ATOMIC_RELEASE);
  ASSERT_CU(cuStreamSynchronize(s_));
  uint32_t v = 0;
  ASSERT_CU(cuMemcpyDtoH(&v, dev_words_, 4));
  EXPECT_EQ(v, 1u);
}

TEST_F(SimStreamMemOpTest, WaitIsReleasedByAWriteOnAnotherStream) {
  ASSERT_CU(cuStreamWaitValue64(s_, dev_words_ + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_EQ));
  ASSERT_CU(cuStreamWriteValue32(s_, dev_words_, 3, 0));
  EXPECT_EQ(cuStreamQuery(s_), CUDA_ERROR_NOT_READY);
  ASSERT_CU(cuStreamWriteValue64(t_, dev_words_ + 8, 0x100000000ull, 0));
  ASSERT_CU(cuStreamSynchronize(s_));
  uint32_t v = 0;
  ASSERT_CU(cuMemcpyDtoH(&v, dev_words_, 4));
  EXPECT_EQ(v, 3u);
}

TEST_F(SimStreamMemOpTest, BatchRunsItsOperationsInOrderWithEachCondition) {
  CUstreamBatchMemOpParams ops[6] = {};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = dev_words_;
  ops[0].writeValue.value = 0xa;
  ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[1].waitValue.address = dev_words_;
  ops[1].waitValue.value = 0x2;
  ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
  ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[2].waitValue.address = dev_words_;
  ops[2].waitValue.value = 0x5;  // ~(0xa | 0x5) != 0
  ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_NOR;
  ops[3].flushRemoteWrites.operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
  ops[4].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[4].writeValue.address = dev_words_ + 8;
  ops[4].writeValue.value64 = 0xfedcba9876543210ull;
  ops[5].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
  ops[5].waitValue.address = dev_words_ + 8;
  ops[5].waitValue.value64 = 0xfedcba9876543210ull;
  ops[5].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  ASSERT_CU(cuStreamBatchMemOp(s_, 6, ops, 0));
  ASSERT_CU(cuStreamSynchronize(s_));
  uint64_t back[2];
  ASSERT_CU(cuMemcpyDtoH(back, dev_words_, 16));
  EXPECT_EQ(back[0] & 0xffffffffu, 0xau);
  EXPECT_EQ(back[1], 0xfedcba9876543210ull);
}

TEST_F(SimStreamMemOpTest, ValidationAsDocumented) {
  EXPECT_EQ(cuStreamWriteValue32(s_, dev_words_ + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue64(s_, dev_words_ + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(s_, dev_words_ + 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue64(s_, dev_words_ + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWriteValue32(s_, dev_words_, 1, 0x10), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamWaitValue32(s_, dev_words_, 1, 0x7), CUDA_ERROR_INVALID_VALUE);
  uint32_t pageable = 0;  // not memory the driver knows
  EXPECT_EQ(cuStreamWriteValue32(s_, reinterpret_cast<CUdeviceptr>(&pageable), 1, 0),
            CUDA_ERROR_INVALID_VALUE);
  CUstreamBatchMemOpParams op = {};
  op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  op.writeValue.address = dev_words_;
  EXPECT_EQ(cuStreamBatchMemOp(s_, 0, &op, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp(s_, 1, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp(s_, 1, &op, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp(s_, 256, &op, 0), CUDA_ERROR_INVALID_VALUE);
  op.writeValue.address = dev_words_ + 2;
  EXPECT_EQ(cuStreamBatchMemOp(s_, 1, &op, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuStreamSynchronize(s_));
  int attr = 0;
  ASSERT_CU(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev_));
  EXPECT_EQ(attr, 1);
  ASSERT_CU(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev_));
  EXPECT_EQ(attr, 1);
}

TEST_F(SimStreamMemOpTest, CaptureIsNotSimulated) {
  ASSERT_CU(cuStreamBeginCapture(s_, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT_EQ(cuStreamWriteValue32(s_, dev_words_, 1, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s_, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  if (g != nullptr) cuGraphDestroy(g);
}

// Note [unmap is immediate]: a value write queued behind a gate faults once its range is
// unmapped before it runs; the error is sticky.
TEST_F(SimStreamMemOpTest, WriteToARangeUnmappedBeforeItRunsFaults) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(ReserveAndCreate(kChunk, &va, &h));
  ASSERT_CU(cuMemMap(va, kChunk, 0, h, 0));
  CUmemAccessDesc rw = DeviceAccess(0);
  ASSERT_CU(cuMemSetAccess(va, kChunk, &rw, 1));
  ASSERT_CU(cuStreamWaitValue32(s_, HostWord(0), 1, CU_STREAM_WAIT_VALUE_EQ));  // the gate
  ASSERT_CU(cuStreamWriteValue32(s_, va, 1, 0));
  ASSERT_CU(cuMemUnmap(va, kChunk));
  // Opens the gate. The write behind it may fault before this call returns, and a call may
  // return the error of earlier asynchronous work (documented for every driver call).
  const CUresult opened = cuStreamWriteValue32(t_, HostWord(0), 1, 0);
  EXPECT_TRUE(opened == CUDA_SUCCESS || opened == CUDA_ERROR_ILLEGAL_ADDRESS) << opened;
  EXPECT_EQ(cuStreamSynchronize(s_), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuMemRelease(h);
  cuMemAddressFree(va, kChunk);
}

}  // namespace
}  // namespace memsim_test

// Batched and 3D peer copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync, cuMemcpy3DPeer*):
// data, documented validation, stream order and the strictness of Note [copy validation].
// Part of memsim_memop_test (MEMSIM_DEVICE_MEMORY=256M).
#include <vector>

#include "sim_test_util.h"

// The CUDA 12.8 ABIs (with failIdx), which cuda.h declares only for the driver's own build.
extern "C" CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs,
                                                    size_t* sizes, size_t count,
                                                    CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                                    size_t numAttrs, size_t* failIdx,
                                                    CUstream hStream);
extern "C" CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList,
                                                      size_t* failIdx, unsigned long long flags,
                                                      CUstream hStream);

namespace memsim_test {
namespace {

[[maybe_unused]] const bool kConfigured = ConfigureSim({{"MEMSIM_DEVICE_MEMORY", "256M"}});

constexpr size_t kChunk = 2u << 20;

class SimCopyBatchTest : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    ASSERT_CU(cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING));
  }
  void TearDown() override {
    if (s_ != nullptr) cuStreamDestroy(s_);
    SimTest::TearDown();
  }
  CUstream s_ = nullptr;
};

CUmemcpyAttributes StreamOrder() {
  CUmemcpyAttributes a = {};
  a.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  return a;
}

TEST_F(SimCopyBatchTest, BatchCopiesEveryPair) {
  const auto pattern = Pattern(4096, 1);
  const size_t bytes = pattern.size() * 4;
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAlloc(&a, bytes));
  ASSERT_CU(cuMemAlloc(&b, bytes));
  std::vector<uint32_t> back(pattern.size());
  // Host to device, then device to device and device to host in a second batch.
  CUdeviceptr dsts1[] = {a};
  CUdeviceptr srcs1[] = {reinterpret_cast<CUdeviceptr>(pattern.data())};
  size_t sizes1[] = {bytes};
  CUmemcpyAttributes attr = StreamOrder();
  size_t idx0 = 0;
  ASSERT_CU(cuMemcpyBatchAsync(dsts1, srcs1, sizes1, 1, &attr, &idx0, 1, s_));
  CUdeviceptr dsts2[] = {b, reinterpret_cast<CUdeviceptr>(back.data())};
  CUdeviceptr srcs2[] = {a, a};
  size_t sizes2[] = {bytes, bytes / 2};
  ASSERT_CU(cuMemcpyBatchAsync(dsts2, srcs2, sizes2, 2, &attr, &idx0, 1, s_));
  ASSERT_CU(cuStreamSynchronize(s_));
  EXPECT_EQ(Checksum(back.data(), bytes / 2), Checksum(pattern.data(), bytes / 2));
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, bytes));
  EXPECT_EQ(Checksum(back.data(), bytes), Checksum(pattern.data(), bytes));
  cuMemFree(a);
  cuMemFree(b);
}

TEST_F(SimCopyBatchTest, BatchValidationAsDocumented) {
  CUdeviceptr a;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  uint32_t host[4] = {};
  CUdeviceptr dsts[] = {a, a};
  CUdeviceptr srcs[] = {reinterpret_cast<CUdeviceptr>(host), a};
  size_t sizes[] = {16, 16};
  CUmemcpyAttributes attr = StreamOrder();
  size_t idx[] = {0, 1};
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 0, &attr, idx, 1, s_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync(nullptr, srcs, sizes, 1, &attr, idx, 1, s_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 0, s_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 2, s_), CUDA_ERROR_INVALID_VALUE);
  size_t bad_first[] = {1};
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, bad_first, 1, s_),
            CUDA_ERROR_INVALID_VALUE);
  CUmemcpyAttributes no_order = {};  // CU_MEMCPY_SRC_ACCESS_ORDER_INVALID
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &no_order, idx, 1, s_),
            CUDA_ERROR_INVALID_VALUE);
  // "Must not be legacy NULL stream".
  EXPECT_EQ(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, idx, 1, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  // The CUDA 12.8 ABI reports which copy failed.
  size_t fail = 0;
  CUdeviceptr freed;
  ASSERT_CU(cuMemAlloc(&freed, 4096));
  ASSERT_CU(cuMemFree(freed));
  CUdeviceptr bad_dsts[] = {a, freed};  // device memory no longer allocated
  EXPECT_EQ(cuMemcpyBatchAsync_ptsz(bad_dsts, srcs, sizes, 2, &attr, idx, 1, &fail, s_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fail, 1u);
  EXPECT_CU(cuStreamSynchronize(s_));
  cuMemFree(a);
}

TEST_F(SimCopyBatchTest, ThreeDPeerCopyMovesEverySlice) {
  // A 3-slice box of 3 rows of 40 bytes inside a pitched 64 x 4 x 4 volume.
  constexpr size_t kPitch = 64, kRows = 4, kDepth = 4, kBytes = kPitch * kRows * kDepth;
  std::vector<unsigned char> src(kBytes), back(kBytes);
  for (size_t i = 0; i < kBytes; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAlloc(&a, kBytes));
  ASSERT_CU(cuMemAlloc(&b, kBytes));
  ASSERT_CU(cuMemcpyHtoD(a, src.data(), kBytes));
  ASSERT_CU(cuMemsetD8(b, 0, kBytes));
  CUDA_MEMCPY3D_PEER p = {};
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = a;
  p.dstDevice = b;
  p.srcContext = p.dstContext = ctx_;
  p.srcXInBytes = 8;
  p.srcY = 1;
  p.srcZ = 1;
  p.dstXInBytes = 4;
  p.srcPitch = p.dstPitch = kPitch;
  p.srcHeight = p.dstHeight = kRows;
  p.WidthInBytes = 40;
  p.Height = 3;
  p.Depth = 3;
  ASSERT_CU(cuMemcpy3DPeerAsync(&p, s_));
  ASSERT_CU(cuStreamSynchronize(s_));
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, kBytes));
  std::vector<unsigned char> model(kBytes, 0);
  for (size_t z = 0; z < 3; ++z) {
    for (size_t y = 0; y < 3; ++y) {
      for (size_t x = 0; x < 40; ++x) {
        model[(z * kRows + y) * kPitch + 4 + x] = src[((z + 1) * kRows + y + 1) * kPitch + 8 + x];
      }
    }
  }
  EXPECT_EQ(Checksum(back.data(), kBytes), Checksum(model.data(), kBytes));
  ASSERT_CU(cuMemsetD8(b, 0, kBytes));
  ASSERT_CU(cuMemcpy3DPeer(&p));  // synchronous: the data is there on return
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, kBytes));
  EXPECT_EQ(Checksum(back.data(), kBytes), Checksum(model.data(), kBytes));
  EXPECT_EQ(cuMemcpy3DPeer(nullptr), CUDA_ERROR_INVALID_VALUE);
  p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  EXPECT_EQ(cuMemcpy3DPeer(&p), CUDA_ERROR_NOT_SUPPORTED);
  cuMemFree(a);
  cuMemFree(b);
}

TEST_F(SimCopyBatchTest, ThreeDBatchCopiesPointerOperands) {
  const auto pattern = Pattern(1024, 2);
  CUdeviceptr a;
  ASSERT_CU(cuMemAlloc(&a, 4096));
  std::vector<uint32_t> back(1024);
  CUDA_MEMCPY3D_BATCH_OP op = {};
  op.src.type = op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = reinterpret_cast<CUdeviceptr>(pattern.data());
  op.dst.op.ptr.ptr = a;
  op.extent = {1024, 2, 2};  // 4 rows of 1 KiB, packed
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  ASSERT_CU(cuMemcpy3DBatchAsync(1, &op, 0, s_));
  ASSERT_CU(cuStreamSynchronize(s_));
  ASSERT_CU(cuMemcpyDtoH(back.data(), a, 4096));
  EXPECT_EQ(Checksum(back.data(), 4096), Checksum(pattern.data(), 4096));
  EXPECT_EQ(cuMemcpy3DBatchAsync(0, &op, 0, s_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, &op, 1, s_), CUDA_ERROR_INVALID_VALUE);  // flags
  op.extent.depth = 0;
  EXPECT_EQ(cuMemcpy3DBatchAsync(1, &op, 0, s_), CUDA_ERROR_INVALID_VALUE);
  op.extent.depth = 1;
  op.dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
  size_t fail = 0;
  EXPECT_EQ(cuMemcpy3DBatchAsync_ptsz(1, &op, &fail, 0, s_), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(fail, 0u);
  cuMemFree(a);
}

// Note [unmap is immediate]: a batched copy queued behind a gate faults once its range is
// unmapped before it runs.
TEST_F(SimCopyBatchTest, BatchUsingARangeUnmappedBeforeItRunsFaults) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(ReserveAndCreate(kChunk, &va, &h));
  ASSERT_CU(cuMemMap(va, kChunk, 0, h, 0));
  CUmemAccessDesc rw = DeviceAccess(0);
  ASSERT_CU(cuMemSetAccess(va, kChunk, &rw, 1));
  int* flag;
  ASSERT_CU(cuMemAllocHost(reinterpret_cast<void**>(&flag), 4));
  *flag = 0;
  uint32_t host[4] = {};
  ASSERT_CU(Launch(wait_flag(), s_, reinterpret_cast<CUdeviceptr>(flag)));
  CUdeviceptr dsts[] = {reinterpret_cast<CUdeviceptr>(host)};
  CUdeviceptr srcs[] = {va};
  size_t sizes[] = {sizeof(host)};
  CUmemcpyAttributes attr = StreamOrder();
  size_t idx0 = 0;
  ASSERT_CU(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &idx0, 1, s_));
  ASSERT_CU(cuMemUnmap(va, kChunk));
  __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
  EXPECT_EQ(cuStreamSynchronize(s_), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuMemFreeHost(flag);
  cuMemRelease(h);
  cuMemAddressFree(va, kChunk);
}

}  // namespace
}  // namespace memsim_test

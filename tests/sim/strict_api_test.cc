// Driver-API rules outside the VMM API that the CUDA driver enforces and the sim once did not:
// pointer-attribute defaults and events of one context. Part of memsim_api_test
// (MEMSIM_DEVICE_COUNT=2; see device_context_test.cc).
#include <cstring>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kChunk = 2u << 20;

using SimStrictApiTest = SimTest;

TEST_F(SimStrictApiTest, PointerAttributesOfUnknownMemoryAreWrittenAsWholeNullValues) {
  std::vector<char> plain(64);
  const CUdeviceptr unknown = reinterpret_cast<CUdeviceptr>(plain.data());
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 CU_POINTER_ATTRIBUTE_P2P_TOKENS, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  CUcontext ctx;
  unsigned type;
  CUdeviceptr dptr;
  CUDA_POINTER_ATTRIBUTE_P2P_TOKENS tokens;
  unsigned long long buffer_id;
  std::memset(&ctx, 0xff, sizeof(ctx));
  std::memset(&type, 0xff, sizeof(type));
  std::memset(&dptr, 0xff, sizeof(dptr));
  std::memset(&tokens, 0xff, sizeof(tokens));
  std::memset(&buffer_id, 0xff, sizeof(buffer_id));
  void* data[] = {&ctx, &type, &dptr, &tokens, &buffer_id};
  ASSERT_CU(cuPointerGetAttributes(5, attrs, data, unknown));
  EXPECT_EQ(ctx, nullptr);
  EXPECT_EQ(type, 0u);
  EXPECT_EQ(dptr, 0u);
  EXPECT_EQ(tokens.p2pToken, 0u);  // the whole struct, not only its first bytes
  EXPECT_EQ(tokens.vaSpaceToken, 0u);
  EXPECT_EQ(buffer_id, 0u);
}

TEST_F(SimStrictApiTest, PointerAttributesRejectMalformedRequestsBeforeWritingAnything) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 static_cast<CUpointer_attribute>(1000)};
  unsigned type = 77;
  int other = 77;
  void* data[] = {&type, &other};
  EXPECT_EQ(cuPointerGetAttributes(2, attrs, data, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(type, 77u);
  attrs[1] = CU_POINTER_ATTRIBUTE_MAPPED;
  data[1] = nullptr;
  EXPECT_EQ(cuPointerGetAttributes(2, attrs, data, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(type, 77u);
  EXPECT_CU(cuMemFree(d));
}

TEST_F(SimStrictApiTest, RangeOfAVmmPointerIsItsReservationAndMappingIsTheMappedRange) {
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, 2 * kChunk, 0, 0, 0));
  CUmemAllocationProp prop = PinnedProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  const CUdeviceptr mapped = va + kChunk;
  ASSERT_CU(cuMemMap(mapped, kChunk, 0, h, 0));
  CUdeviceptr start = 0;
  size_t size = 0;
  void* mapping_base = nullptr;
  size_t mapping_size = 0;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, mapped + 8));
  ASSERT_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, mapped + 8));
  ASSERT_CU(
      cuPointerGetAttribute(&mapping_base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, mapped + 8));
  ASSERT_CU(cuPointerGetAttribute(&mapping_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, mapped + 8));
  EXPECT_EQ(start, va);
  EXPECT_EQ(size, 2 * kChunk);
  EXPECT_EQ(reinterpret_cast<CUdeviceptr>(mapping_base), mapped);
  EXPECT_EQ(mapping_size, kChunk);
  ASSERT_CU(cuMemUnmap(mapped, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, 2 * kChunk));
}

TEST_F(SimStrictApiTest, EventsAreRecordedOnlyOnStreamsOfTheirContext) {
  CUevent ev;
  ASSERT_CU(cuEventCreate(&ev, CU_EVENT_DEFAULT));
  CUcontext other;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, 1));  // now current
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(cuEventRecord(ev, s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventRecord(ev, nullptr), CUDA_ERROR_INVALID_HANDLE);  // other's default stream
  // A stream may wait for an event of another context (documented for cuStreamWaitEvent).
  ASSERT_CU(cuCtxPushCurrent(ctx_));
  ASSERT_CU(cuEventRecord(ev, nullptr));
  CUcontext popped;
  ASSERT_CU(cuCtxPopCurrent(&popped));
  EXPECT_CU(cuStreamWaitEvent(s, ev, 0));
  EXPECT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuStreamDestroy(s));
  EXPECT_CU(cuCtxDestroy(other));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  EXPECT_CU(cuEventDestroy(ev));
}

}  // namespace
}  // namespace memsim_test

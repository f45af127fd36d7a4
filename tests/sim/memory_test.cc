// cuMemAlloc family, cuMemGetInfo, copies, memsets, host memory, pointer attributes, pools.
// Runs with MEMSIM_DEVICE_MEMORY=256M.
#include <cstring>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kCapacity = 256u << 20;

using SimMemoryTest = SimTest;

TEST_F(SimMemoryTest, OutOfMemoryAtCapacityAndRecoveryAfterFree) {
  std::vector<CUdeviceptr> blocks;
  CUdeviceptr p;
  for (size_t i = 0; i < kCapacity / (32u << 20); ++i) {
    ASSERT_CU(cuMemAlloc(&p, 32u << 20));
    blocks.push_back(p);
  }
  EXPECT_EQ(cuMemAlloc(&p, 4096), CUDA_ERROR_OUT_OF_MEMORY);
  size_t free = 1, total = 0;
  ASSERT_CU(cuMemGetInfo(&free, &total));
  EXPECT_EQ(free, 0u);
  EXPECT_EQ(total, kCapacity);
  ASSERT_CU(cuMemFree(blocks.back()));
  blocks.pop_back();
  ASSERT_CU(cuMemAlloc(&p, 32u << 20));  // the freed capacity is usable again
  blocks.push_back(p);
  for (CUdeviceptr b : blocks) ASSERT_CU(cuMemFree(b));
  ASSERT_CU(cuMemGetInfo(&free, &total));
  EXPECT_EQ(free, kCapacity);
}

TEST_F(SimMemoryTest, SingleRequestLargerThanTheDeviceFails) {
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, kCapacity + 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(SimMemoryTest, MemGetInfoTracksAllocationsAndFrees) {
  size_t free0, total;
  ASSERT_CU(cuMemGetInfo(&free0, &total));
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAlloc(&a, 10u << 20));
  ASSERT_CU(cuMemAlloc(&b, 3000));  // page-granular footprint
  size_t free1;
  ASSERT_CU(cuMemGetInfo(&free1, &total));
  EXPECT_EQ(free0 - free1, (10u << 20) + 4096);
  ASSERT_CU(cuMemFree(a));
  ASSERT_CU(cuMemFree(b));
  size_t free2;
  ASSERT_CU(cuMemGetInfo(&free2, &total));
  EXPECT_EQ(free2, free0);
  EXPECT_EQ(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);  // double free is rejected
}

TEST_F(SimMemoryTest, CopiesRoundTripWithIntactChecksums) {
  const size_t words = (8u << 20) / 4;
  auto src = Pattern(words, 1);
  std::vector<uint32_t> back(words, 0);
  CUdeviceptr d1, d2;
  ASSERT_CU(cuMemAlloc(&d1, words * 4));
  ASSERT_CU(cuMemAlloc(&d2, words * 4));
  ASSERT_CU(cuMemcpyHtoD(d1, src.data(), words * 4));
  ASSERT_CU(cuMemcpyDtoD(d2, d1, words * 4));
  ASSERT_CU(cuMemcpyDtoH(back.data(), d2, words * 4));
  EXPECT_EQ(Checksum(back.data(), words * 4), Checksum(src.data(), words * 4));
  // Unified cuMemcpy infers directions from the addresses.
  std::vector<uint32_t> back2(words, 0);
  ASSERT_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(back2.data()), d1, words * 4));
  EXPECT_EQ(back2, src);
  // Device-side checksum through a kernel agrees with the host's.
  CUdeviceptr sum;
  ASSERT_CU(cuMemAlloc(&sum, 8));
  ASSERT_CU(Launch(sum_u32(), nullptr, d2, static_cast<uint64_t>(words), sum));
  uint64_t device_sum = 0, host_sum = 0;
  ASSERT_CU(cuMemcpyDtoH(&device_sum, sum, 8));
  for (uint32_t w : src) host_sum += w;
  EXPECT_EQ(device_sum, host_sum);
  ASSERT_CU(cuMemFree(d1));
  ASSERT_CU(cuMemFree(d2));
  ASSERT_CU(cuMemFree(sum));
}

TEST_F(SimMemoryTest, MemsetsWriteTheirElementPatterns) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  std::vector<uint8_t> host(4096);
  ASSERT_CU(cuMemsetD8(d, 0x5a, 4096));
  ASSERT_CU(cuMemcpyDtoH(host.data(), d, 4096));
  for (uint8_t b : host) ASSERT_EQ(b, 0x5a);
  ASSERT_CU(cuMemsetD16(d + 2, 0x1234, 10));
  ASSERT_CU(cuMemsetD32(d + 64, 0xdeadbeef, 4));
  ASSERT_CU(cuMemcpyDtoH(host.data(), d, 4096));
  uint16_t h16;
  std::memcpy(&h16, host.data() + 2, 2);
  EXPECT_EQ(h16, 0x1234);
  std::memcpy(&h16, host.data() + 20, 2);
  EXPECT_EQ(h16, 0x1234);
  EXPECT_EQ(host[22], 0x5a);  // exactly N elements written
  uint32_t h32;
  std::memcpy(&h32, host.data() + 76, 4);
  EXPECT_EQ(h32, 0xdeadbeefu);
  EXPECT_EQ(host[80], 0x5a);
  EXPECT_EQ(cuMemsetD32(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);  // misaligned
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimMemoryTest, PitchedAllocationAnd2DCopyKeepRows) {
  CUdeviceptr d;
  size_t pitch = 0;
  const size_t width = 100, height = 16;
  ASSERT_CU(cuMemAllocPitch(&d, &pitch, width, height, 4));
  EXPECT_GE(pitch, width);
  EXPECT_EQ(pitch % 256, 0u);
  std::vector<uint8_t> src(width * height), dst(width * height, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 3);
  CUDA_MEMCPY2D up = {};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = src.data();
  up.srcPitch = width;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = d;
  up.dstPitch = pitch;
  up.WidthInBytes = width;
  up.Height = height;
  ASSERT_CU(cuMemcpy2D(&up));
  CUDA_MEMCPY2D down = {};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = d;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = dst.data();
  down.dstPitch = width;
  down.WidthInBytes = width;
  down.Height = height;
  ASSERT_CU(cuMemcpy2D(&down));
  EXPECT_EQ(Checksum(dst.data(), dst.size()), Checksum(src.data(), src.size()));
  ASSERT_CU(cuMemsetD2D8(d, pitch, 0x11, width, height));
  ASSERT_CU(cuMemcpy2D(&down));
  for (uint8_t b : dst) ASSERT_EQ(b, 0x11);
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimMemoryTest, AddressRangeOfAnInteriorPointer) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 10000));
  CUdeviceptr base = 0;
  size_t size = 0;
  ASSERT_CU(cuMemGetAddressRange(&base, &size, d + 1234));
  EXPECT_EQ(base, d);
  EXPECT_EQ(size, 10000u);
  ASSERT_CU(cuMemFree(d));
  EXPECT_EQ(cuMemGetAddressRange(&base, &size, d + 1234), CUDA_ERROR_NOT_FOUND);
}

TEST_F(SimMemoryTest, CopiesRejectAddressesThatAreNotDeviceMemory) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096));
  std::vector<uint8_t> host(8192);
  EXPECT_EQ(cuMemcpyHtoD(d, host.data(), 8192), CUDA_ERROR_INVALID_VALUE);  // past the end
  EXPECT_EQ(cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(host.data()), host.data(), 16),
            CUDA_ERROR_INVALID_VALUE);  // pageable host memory is not a device pointer
  ASSERT_CU(cuMemFree(d));
  EXPECT_EQ(cuMemcpyHtoD(d, host.data(), 16), CUDA_ERROR_INVALID_VALUE);  // freed
  EXPECT_EQ(cuMemsetD8(d, 0, 16), CUDA_ERROR_INVALID_VALUE);
  CUcontext cur;
  ASSERT_CU(cuCtxGetCurrent(&cur));
  EXPECT_EQ(cur, ctx_);
  ASSERT_CU(cuCtxSynchronize());  // validation errors are not sticky
}

TEST_F(SimMemoryTest, PageLockedHostMemoryIsDeviceAccessible) {
  void* h = nullptr;
  ASSERT_CU(cuMemHostAlloc(&h, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP));
  CUdeviceptr dh;
  ASSERT_CU(cuMemHostGetDevicePointer(&dh, h, 0));
  // A kernel writes through the device pointer; the host sees it.
  ASSERT_CU(Launch(fill(), nullptr, dh, 0xabcd1234u, static_cast<uint64_t>(1000)));
  ASSERT_CU(cuCtxSynchronize());
  EXPECT_EQ(static_cast<uint32_t*>(h)[999], 0xabcd1234u);
  unsigned flags = 0;
  ASSERT_CU(cuMemHostGetFlags(&flags, h));
  EXPECT_EQ(flags, static_cast<unsigned>(CU_MEMHOSTALLOC_DEVICEMAP));
  ASSERT_CU(cuMemFreeHost(h));

  std::vector<uint32_t> buf(4096);
  ASSERT_CU(cuMemHostRegister(buf.data(), buf.size() * 4, CU_MEMHOSTREGISTER_DEVICEMAP));
  EXPECT_EQ(cuMemHostRegister(buf.data(), 16, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_CU(cuMemHostGetDevicePointer(&dh, buf.data(), 0));
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 4096 * 4));
  ASSERT_CU(cuMemsetD32(d, 7, 4096));
  ASSERT_CU(cuMemcpyDtoD(dh, d, 4096 * 4));  // registered memory as a device-side operand
  EXPECT_EQ(buf[4095], 7u);
  ASSERT_CU(cuMemHostUnregister(buf.data()));
  EXPECT_EQ(cuMemHostUnregister(buf.data()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  ASSERT_CU(cuMemFree(d));
}

TEST_F(SimMemoryTest, PointerAttributesDistinguishDeviceHostAndUnknownMemory) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, 1 << 20));
  unsigned type = 0;
  ASSERT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  CUcontext owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d));
  EXPECT_EQ(owner, ctx_);
  CUdeviceptr start = 0;
  size_t size = 0;
  ASSERT_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
  ASSERT_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
  EXPECT_EQ(start, d);
  EXPECT_EQ(size, 1u << 20);
  int ordinal = -1;
  ASSERT_CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
  EXPECT_EQ(ordinal, 0);
  void* hp;
  EXPECT_EQ(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d),
            CUDA_ERROR_INVALID_VALUE);

  CUdeviceptr d2;
  ASSERT_CU(cuMemAlloc(&d2, 4096));
  unsigned long long id1 = 0, id2 = 0;
  ASSERT_CU(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
  ASSERT_CU(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, d2));
  EXPECT_NE(id1, id2);

  void* h;
  ASSERT_CU(cuMemAllocHost(&h, 4096));
  ASSERT_CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(h)));
  EXPECT_EQ(type, static_cast<unsigned>(CU_MEMORYTYPE_HOST));

  int stack_var = 0;
  const auto unknown = reinterpret_cast<CUdeviceptr>(&stack_var);
  EXPECT_EQ(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown),
            CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_MAPPED};
  unsigned t2 = 99;
  int managed = 99, mapped = 99;
  void* data[] = {&t2, &managed, &mapped};
  ASSERT_CU(cuPointerGetAttributes(3, attrs, data, unknown));
  EXPECT_EQ(t2, 0u);
  EXPECT_EQ(mapped, 0);
  ASSERT_CU(cuPointerGetAttributes(3, attrs, data, d));
  EXPECT_EQ(t2, static_cast<unsigned>(CU_MEMORYTYPE_DEVICE));
  EXPECT_EQ(managed, 0);
  EXPECT_EQ(mapped, 1);
  ASSERT_CU(cuMemFreeHost(h));
  ASSERT_CU(cuMemFree(d));
  ASSERT_CU(cuMemFree(d2));
}

TEST_F(SimMemoryTest, StreamOrderedAllocationChargesUntilTheFreeRuns) {
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  size_t free0, total;
  ASSERT_CU(cuMemGetInfo(&free0, &total));
  CUdeviceptr p;
  ASSERT_CU(cuMemAllocAsync(&p, 8u << 20, s));
  ASSERT_CU(cuMemsetD32Async(p, 3, (8u << 20) / 4, s));
  CUmemoryPool pool;
  ASSERT_CU(cuDeviceGetDefaultMemPool(&pool, 0));
  CUmemoryPool owner = nullptr;
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(owner, pool);
  cuuint64_t used = 0;
  ASSERT_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, 8u << 20);
  ASSERT_CU(cuMemFreeAsync(p, s));
  ASSERT_CU(cuStreamSynchronize(s));
  size_t free1;
  ASSERT_CU(cuMemGetInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
  ASSERT_CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  EXPECT_EQ(used, 0u);
  ASSERT_CU(cuMemPoolTrimTo(pool, 0));

  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool mine;
  ASSERT_CU(cuMemPoolCreate(&mine, &props));
  ASSERT_CU(cuMemAllocFromPoolAsync(&p, 4096, mine, s));
  ASSERT_CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(owner, mine);
  ASSERT_CU(cuMemFreeAsync(p, s));
  ASSERT_CU(cuStreamSynchronize(s));
  ASSERT_CU(cuMemPoolDestroy(mine));
  EXPECT_EQ(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);  // the default pool stays
  ASSERT_CU(cuStreamDestroy(s));
}

}  // namespace
}  // namespace memsim_test

// What NVIDIA's runtime needs from the driver beyond the documented API (Note [export tables] in
// sim/src/export_tables.h) and the entry points added for it: occupancy, stream attributes,
// peer access, pools by location, unsupported features' answers. The runtime itself runs on the
// sim in tests/cuda; these tests pin each piece through the driver API alone.
#include <cstring>

#include "sim_test_util.h"

namespace {

using memsim_test::ConfigureSim;

const bool kConfigured = ConfigureSim(
    {{"MEMSIM_DEVICE_COUNT", "2"}, {"MEMSIM_DEVICE_MEMORY", "256M"}, {"MEMSIM_NODE", ""}});

CUuuid Uuid(std::initializer_list<unsigned> bytes) {
  CUuuid id;
  int i = 0;
  for (unsigned b : bytes) id.bytes[i++] = static_cast<char>(b);
  return id;
}

const CUuuid kRuntimeInterface = Uuid({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87,
                                       0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9});
const CUuuid kContextStorage = Uuid({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3,
                                     0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93});
const CUuuid kIntegrity = Uuid({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba,
                                0x12, 0x3c, 0x66, 0xe1, 0xf2});
const CUuuid kToolsTls = Uuid({0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6,
                               0xe7, 0x8a, 0x3a, 0xec, 0xdc});

using PrimaryContextFn = CUresult (*)(CUcontext*, CUdevice);
using StoragePutFn = CUresult (*)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
using StorageDeleteFn = CUresult (*)(CUcontext, void*);
using StorageGetFn = CUresult (*)(void**, CUcontext, void*);
using IntegrityFn = CUresult (*)(uint32_t, uint64_t, uint64_t*);

const void* const* Table(const CUuuid& id) {
  const void* table = nullptr;
  EXPECT_EQ(cuGetExportTable(&table, &id), CUDA_SUCCESS);
  return static_cast<const void* const*>(table);
}

class RuntimeSupportTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_CU(cuInit(0)); }
};

TEST_F(RuntimeSupportTest, UnknownExportTableIsRefused) {
  const CUuuid unknown = Uuid({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  const void* table = reinterpret_cast<const void*>(1);
  EXPECT_EQ(cuGetExportTable(&table, &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(table, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &kToolsTls), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(RuntimeSupportTest, SizedTablesStartWithTheirSize) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kRuntimeInterface)[0]), 13 * sizeof(void*));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kToolsTls)[0]), 4 * sizeof(void*));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kIntegrity)[0]), 3 * sizeof(void*));
  EXPECT_EQ(Table(kContextStorage)[3], nullptr);  // put, delete, get, then NULL
}

// The runtime's private primary-context query: the handle a later retain returns, without
// activating the context (observed with NVIDIA's driver and runtime).
TEST_F(RuntimeSupportTest, PrimaryContextQueryDoesNotRetain) {
  auto query = reinterpret_cast<PrimaryContextFn>(Table(kRuntimeInterface)[2]);
  CUcontext peeked = nullptr;
  ASSERT_CU(query(&peeked, 1));
  ASSERT_NE(peeked, nullptr);
  unsigned flags = 0;
  int active = -1;
  ASSERT_CU(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(active, 0);
  CUcontext retained = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&retained, 1));
  EXPECT_EQ(retained, peeked);
  ASSERT_CU(cuDevicePrimaryCtxRelease(1));
  EXPECT_EQ(query(&peeked, 7), CUDA_ERROR_INVALID_DEVICE);
}

// The handle of a primary context stays valid after its last release and after a reset; the
// next retain returns the same handle, with its memory freed in between.
TEST_F(RuntimeSupportTest, PrimaryContextHandleOutlivesReleaseAndReset) {
  CUcontext first = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&first, 0));
  ASSERT_CU(cuCtxSetCurrent(first));
  size_t free_before = 0, total = 0;
  ASSERT_CU(cuMemGetInfo(&free_before, &total));
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, 64 << 20));
  ASSERT_CU(cuDevicePrimaryCtxReset(0));
  ASSERT_CU(cuCtxSetCurrent(first));  // what the runtime does after cudaDeviceReset
  CUcontext again = nullptr;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&again, 0));
  EXPECT_EQ(again, first);
  size_t free_after = 0;
  ASSERT_CU(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_after, free_before);  // the reset freed the allocation
  ASSERT_CU(cuMemAlloc(&p, 1 << 20));
  ASSERT_CU(cuMemsetD8(p, 1, 1 << 20));
  ASSERT_CU(cuDevicePrimaryCtxRelease(0));
  ASSERT_CU(cuCtxSetCurrent(nullptr));
}

struct DestructorCall {
  CUcontext ctx = nullptr;
  void* key = nullptr;
  void* value = nullptr;
  int calls = 0;
};
DestructorCall g_destructor;
void RecordDestructor(CUcontext ctx, void* key, void* value) {
  g_destructor.ctx = ctx;
  g_destructor.key = key;
  g_destructor.value = value;
  ++g_destructor.calls;
}

TEST_F(RuntimeSupportTest, ContextLocalStorageRoundTripAndDestructor) {
  auto put = reinterpret_cast<StoragePutFn>(Table(kContextStorage)[0]);
  auto del = reinterpret_cast<StorageDeleteFn>(Table(kContextStorage)[1]);
  auto get = reinterpret_cast<StorageGetFn>(Table(kContextStorage)[2]);
  int key_a = 0, key_b = 0, value_a = 0, value_b = 0;
  void* out = nullptr;
  ASSERT_CU(cuCtxSetCurrent(nullptr));
  EXPECT_EQ(get(&out, nullptr, &key_a), CUDA_ERROR_INVALID_CONTEXT);  // no current context
  CUcontext ctx;
  ASSERT_CU(cuCtxCreate(&ctx, nullptr, 0, 0));
  EXPECT_NE(get(&out, nullptr, &key_a), CUDA_SUCCESS);  // missing key
  ASSERT_CU(put(nullptr, &key_a, &value_a, nullptr));   // NULL = the current context
  ASSERT_CU(put(ctx, &key_b, &value_b, &RecordDestructor));
  ASSERT_CU(get(&out, ctx, &key_a));
  EXPECT_EQ(out, &value_a);
  ASSERT_CU(get(&out, nullptr, &key_b));
  EXPECT_EQ(out, &value_b);
  ASSERT_CU(del(nullptr, &key_a));
  EXPECT_NE(get(&out, ctx, &key_a), CUDA_SUCCESS);
  EXPECT_NE(del(ctx, &key_a), CUDA_SUCCESS);
  g_destructor = {};
  ASSERT_CU(cuCtxDestroy(ctx));
  EXPECT_EQ(g_destructor.calls, 1);
  EXPECT_EQ(g_destructor.ctx, ctx);
  EXPECT_EQ(g_destructor.key, &key_b);
  EXPECT_EQ(g_destructor.value, &value_b);
}

TEST_F(RuntimeSupportTest, PrimaryContextResetRunsStorageDestructors) {
  auto put = reinterpret_cast<StoragePutFn>(Table(kContextStorage)[0]);
  auto get = reinterpret_cast<StorageGetFn>(Table(kContextStorage)[2]);
  CUcontext primary;
  ASSERT_CU(cuDevicePrimaryCtxRetain(&primary, 1));
  int key = 0, value = 0;
  ASSERT_CU(put(primary, &key, &value, &RecordDestructor));
  g_destructor = {};
  ASSERT_CU(cuDevicePrimaryCtxReset(1));
  EXPECT_EQ(g_destructor.calls, 1);
  EXPECT_EQ(g_destructor.ctx, primary);
  void* out = nullptr;
  EXPECT_NE(get(&out, primary, &key), CUDA_SUCCESS);  // forgotten with the destructor
}

TEST_F(RuntimeSupportTest, IntegrityCheckAnswers) {
  auto check = reinterpret_cast<IntegrityFn>(Table(kIntegrity)[1]);
  uint64_t out[2] = {0, 0};
  ASSERT_CU(check(13000, 1764000000, out));
  EXPECT_EQ(out[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
  uint64_t a[2], b[2];
  ASSERT_CU(check(13002, 1764000000, a));
  ASSERT_CU(check(13002, 1764000001, b));
  EXPECT_FALSE(a[0] == b[0] && a[1] == b[1]) << "the answer depends on the time argument";
  EXPECT_EQ(check(13002, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

class RuntimeEntryPointTest : public memsim_test::SimTest {};

TEST_F(RuntimeEntryPointTest, OccupancyFollowsTheSmLimits) {
  CUfunction f = fn_[1];  // saxpy: 32 registers per thread, no shared memory
  int blocks = 0;
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0));
  EXPECT_EQ(blocks, 8);  // 2048 threads and 65536 registers per SM
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 1024, 0));
  EXPECT_EQ(blocks, 2);
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 256, 100000,
                                                                 CU_OCCUPANCY_DEFAULT));
  EXPECT_EQ(blocks, 2);  // 233472 bytes of shared memory per SM
  ASSERT_CU(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 2048, 0));
  EXPECT_EQ(blocks, 0);  // over the block limit
  EXPECT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f, 256, 0, 0x80),
            CUDA_ERROR_INVALID_VALUE);
  int min_grid = 0, block = 0;
  ASSERT_CU(cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, nullptr, 0, 0));
  EXPECT_EQ(block, 1024);
  EXPECT_EQ(min_grid, 2 * 132);
  size_t smem = 0;
  ASSERT_CU(cuOccupancyAvailableDynamicSMemPerBlock(&smem, f, 2, 256));
  EXPECT_EQ(smem, 233472 / 2 - 1024);
}

TEST_F(RuntimeEntryPointTest, StreamAttributesRoundTrip) {
  CUstream s, t;
  ASSERT_CU(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
  ASSERT_CU(cuStreamCreate(&t, 0));
  CUstreamAttrValue v;
  ASSERT_CU(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v));
  EXPECT_EQ(v.syncPolicy, CU_SYNC_POLICY_AUTO);
  ASSERT_CU(cuStreamGetAttribute(s, CU_STREAM_ATTRIBUTE_PRIORITY, &v));
  EXPECT_EQ(v.priority, -1);
  std::memset(&v, 0, sizeof(v));
  v.accessPolicyWindow.base_ptr = reinterpret_cast<void*>(0x1000);
  v.accessPolicyWindow.num_bytes = 4096;
  v.accessPolicyWindow.hitRatio = 0.5f;
  ASSERT_CU(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
  v.accessPolicyWindow.hitRatio = 2.0f;
  EXPECT_EQ(cuStreamSetAttribute(s, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamCopyAttributes(t, s));
  CUstreamAttrValue copied;
  ASSERT_CU(cuStreamGetAttribute(t, CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &copied));
  EXPECT_EQ(copied.accessPolicyWindow.num_bytes, 4096u);
  EXPECT_EQ(copied.accessPolicyWindow.hitRatio, 0.5f);
  EXPECT_EQ(
      cuStreamGetAttribute(s, static_cast<CUstreamAttrID>(CU_LAUNCH_ATTRIBUTE_COOPERATIVE), &v),
      CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuStreamDestroy(s));
  ASSERT_CU(cuStreamDestroy(t));
}

TEST_F(RuntimeEntryPointTest, PeerAccessBookkeeping) {
  CUcontext other;
  ASSERT_CU(cuCtxCreate(&other, nullptr, 0, 1));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  EXPECT_EQ(cuCtxDisablePeerAccess(other), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  ASSERT_CU(cuCtxEnablePeerAccess(other, 0));
  EXPECT_EQ(cuCtxEnablePeerAccess(other, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  ASSERT_CU(cuCtxDisablePeerAccess(other));
  EXPECT_EQ(cuCtxEnablePeerAccess(other, 1), CUDA_ERROR_INVALID_VALUE);
  CUcontext same_device;
  ASSERT_CU(cuCtxCreate(&same_device, nullptr, 0, 0));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
  EXPECT_EQ(cuCtxEnablePeerAccess(same_device, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
  int value = -1;
  ASSERT_CU(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cuDeviceGetP2PAttribute(&value, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 0),
            CUDA_ERROR_INVALID_DEVICE);
  ASSERT_CU(cuCtxDestroy(same_device));
  ASSERT_CU(cuCtxDestroy(other));
  ASSERT_CU(cuCtxSetCurrent(ctx_));
}

TEST_F(RuntimeEntryPointTest, PoolsByLocation) {
  CUmemLocation device1 = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  CUmemoryPool by_location = nullptr, by_device = nullptr;
  ASSERT_CU(cuMemGetDefaultMemPool(&by_location, &device1, CU_MEM_ALLOCATION_TYPE_PINNED));
  ASSERT_CU(cuDeviceGetDefaultMemPool(&by_device, 1));
  EXPECT_EQ(by_location, by_device);
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = device1;
  CUmemoryPool pool;
  ASSERT_CU(cuMemPoolCreate(&pool, &props));
  ASSERT_CU(cuMemSetMemPool(&device1, CU_MEM_ALLOCATION_TYPE_PINNED, pool));
  CUmemoryPool current = nullptr;
  ASSERT_CU(cuMemGetMemPool(&current, &device1, CU_MEM_ALLOCATION_TYPE_PINNED));
  EXPECT_EQ(current, pool);
  ASSERT_CU(cuDeviceGetMemPool(&current, 1));
  EXPECT_EQ(current, pool);
  CUmemLocation device0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  EXPECT_EQ(cuMemSetMemPool(&device0, CU_MEM_ALLOCATION_TYPE_PINNED, pool),
            CUDA_ERROR_INVALID_VALUE);  // a pool of another device
  CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemGetDefaultMemPool(&current, &host, CU_MEM_ALLOCATION_TYPE_PINNED),
            CUDA_ERROR_NOT_SUPPORTED);
  ASSERT_CU(cuMemSetMemPool(&device1, CU_MEM_ALLOCATION_TYPE_PINNED, by_device));
  ASSERT_CU(cuMemPoolDestroy(pool));
}

TEST_F(RuntimeEntryPointTest, UnsupportedFeaturesAnswerAsDocumented) {
  CUdeviceptr p;
  ASSERT_CU(cuMemAlloc(&p, 1 << 20));
  CUmemLocation device0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  // Not managed memory: the documented answer of the managed-memory hints.
  EXPECT_EQ(cuMemPrefetchAsync(p, 1 << 20, device0, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemAdvise(p, 1 << 20, CU_MEM_ADVISE_SET_READ_MOSTLY, device0),
            CUDA_ERROR_INVALID_VALUE);
  CUarray array;
  CUDA_ARRAY_DESCRIPTOR desc = {};
  EXPECT_EQ(cuArrayCreate(&array, &desc), CUDA_ERROR_NOT_SUPPORTED);
  // Stream memory operations are simulated (Note [stream memory operations]): the v2 ones, as
  // on a GPU, where the legacy v1 attribute is 0 unless the kernel module enables it.
  int can_use = -1;
  ASSERT_CU(cuDeviceGetAttribute(&can_use, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev_));
  EXPECT_EQ(can_use, 0);
  ASSERT_CU(
      cuDeviceGetAttribute(&can_use, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev_));
  EXPECT_EQ(can_use, 1);
  ASSERT_CU(
      cuDeviceGetAttribute(&can_use, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev_));
  EXPECT_EQ(can_use, 1);
  ASSERT_CU(cuMemFree(p));
  // Every flavour is reachable by version, as the runtime asks for them.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  ASSERT_CU(cuGetProcAddress_v2("cuStreamWaitValue32", &fn, 8000, 0, &status));
  EXPECT_NE(fn, nullptr);
  ASSERT_CU(cuGetProcAddress_v2("cuGetExportTable", &fn, 13000, 0, &status));
  EXPECT_EQ(fn, reinterpret_cast<void*>(&cuGetExportTable));
  ASSERT_CU(cuGetProcAddress_v2("cuGLInit", &fn, 13000, 0, &status));  // success, no pointer
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

}  // namespace

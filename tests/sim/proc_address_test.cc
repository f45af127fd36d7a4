// cuGetProcAddress(_v2): versioned and per-thread-stream lookups, as cudart performs them.
#include <dlfcn.h>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

void* Exported(const char* symbol) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr);
  void* p = dlsym(lib, symbol);
  EXPECT_NE(p, nullptr) << symbol;
  return p;
}

void* Lookup(const char* symbol, int version, cuuint64_t flags, CUresult* r,
             CUdriverProcAddressQueryResult* status) {
  void* pfn = reinterpret_cast<void*>(0x1);
  *r = cuGetProcAddress(symbol, &pfn, version, flags, status);
  return pfn;
}

TEST(SimProcAddress, NewestFlavourAtOrBelowTheRequestedVersion) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  EXPECT_EQ(Lookup("cuMemAlloc", 12000, 0, &r, &st), Exported("cuMemAlloc_v2"));
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(Lookup("cuMemAlloc", 3010, 0, &r, &st), Exported("cuMemAlloc"));
  EXPECT_EQ(Lookup("cuCtxCreate", 13000, 0, &r, &st), Exported("cuCtxCreate_v4"));
  EXPECT_EQ(Lookup("cuCtxCreate", 12000, 0, &r, &st), Exported("cuCtxCreate_v3"));
  EXPECT_EQ(Lookup("cuGetProcAddress", 12000, 0, &r, &st), Exported("cuGetProcAddress_v2"));
  EXPECT_EQ(Lookup("cuLaunchKernel", 13000, 0, &r, &st), Exported("cuLaunchKernel"));
  EXPECT_EQ(Lookup("cuEventElapsedTime", 13000, 0, &r, &st), Exported("cuEventElapsedTime_v2"));
}

TEST(SimProcAddress, PerThreadFlagSelectsPtszAndPtdsFlavours) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  const auto ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(Lookup("cuStreamSynchronize", 12000, ptds, &r, &st),
            Exported("cuStreamSynchronize_ptsz"));
  EXPECT_EQ(Lookup("cuMemcpyHtoD", 12000, ptds, &r, &st), Exported("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(Lookup("cuLaunchKernel", 12000, ptds, &r, &st), Exported("cuLaunchKernel_ptsz"));
  // Functions without a stream have no per-thread flavour: the plain one is returned.
  EXPECT_EQ(Lookup("cuMemAlloc", 12000, ptds, &r, &st), Exported("cuMemAlloc_v2"));
  EXPECT_EQ(Lookup("cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &r, &st),
            Exported("cuStreamSynchronize"));
  // Below the first per-thread flavour (7000) a name that has them has no per-thread answer
  // (a driver 580 answers so); a name without them still answers with its plain flavour.
  EXPECT_EQ(Lookup("cuLaunchKernel", 4000, ptds, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(Lookup("cuMemAlloc", 4000, ptds, &r, &st), Exported("cuMemAlloc_v2"));
}

TEST(SimProcAddress, UnknownAndTooNewSymbolsAreReportedDistinctly) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  // Documented (and answered so by a driver 580): CUDA_SUCCESS with a null pointer.
  EXPECT_EQ(Lookup("cuDoesNotExist", 13000, 0, &r, &st), nullptr);
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(Lookup("cuMemAddressReserve", 10000, 0, &r, &st), nullptr);  // added in 10.2
  EXPECT_EQ(r, CUDA_SUCCESS);
  EXPECT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  void* pfn;
  EXPECT_EQ(cuGetProcAddress("cuInit", &pfn, 13000, 0x100, nullptr), CUDA_ERROR_INVALID_VALUE);
  int driver = 0;
  ASSERT_CU(cuDriverGetVersion(&driver));
  EXPECT_EQ(cuGetProcAddress("cuInit", &pfn, driver + 10, 0, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(SimProcAddress, ReturnedEntryPointsWork) {
  CUresult r;
  CUdriverProcAddressQueryResult st;
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(Lookup("cuInit", 13000, 0, &r, &st));
  ASSERT_NE(init, nullptr);
  ASSERT_CU(init(0));
  auto get_version =
      reinterpret_cast<CUresult (*)(int*)>(Lookup("cuDriverGetVersion", 13000, 0, &r, &st));
  int v = 0;
  ASSERT_CU(get_version(&v));
  EXPECT_EQ(v, 13000);
  auto count = reinterpret_cast<CUresult (*)(int*)>(Lookup("cuDeviceGetCount", 13000, 0, &r, &st));
  int n = 0;
  ASSERT_CU(count(&n));
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace memsim_test

// Virtual memory management API: reserve, create, map, set access, unmap, release.
// Runs with MEMSIM_DEVICE_MEMORY=256M.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kChunk = 2u << 20;

class SimVmmTest : public SimTest {
 protected:
  CUmemAllocationProp DeviceProp() const {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
  }
  CUmemAllocationProp HostNumaProp() const {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop.location.id = 0;
    return prop;
  }
  CUresult GrantReadWrite(CUdeviceptr p, size_t size) {
    CUmemAccessDesc desc = {};
    desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = 0;
    desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return cuMemSetAccess(p, size, &desc, 1);
  }
  // Reserves kChunk of address space and maps one new device chunk there, read-write.
  void MapReadWriteChunk(CUdeviceptr* va, CUmemGenericAllocationHandle* h) {
    ASSERT_CU(cuMemAddressReserve(va, kChunk, 0, 0, 0));
    CUmemAllocationProp prop = DeviceProp();
    ASSERT_CU(cuMemCreate(h, kChunk, &prop, 0));
    ASSERT_CU(cuMemMap(*va, kChunk, 0, *h, 0));
    ASSERT_CU(GrantReadWrite(*va, kChunk));
  }
  size_t FreeBytes() {
    size_t free = 0, total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    return free;
  }
};

TEST_F(SimVmmTest, GranularityIsTwoMegabytes) {
  CUmemAllocationProp prop = DeviceProp();
  size_t g = 0;
  ASSERT_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(g, kChunk);
  ASSERT_CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT_EQ(g, kChunk);
  CUmemAllocationProp host = HostNumaProp();
  ASSERT_CU(cuMemGetAllocationGranularity(&g, &host, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(g, kChunk);
}

TEST_F(SimVmmTest, ReserveCreateMapSetAccessThenUseFromCopiesAndKernels) {
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kChunk, 0, 0, 0));
  EXPECT_EQ(va % kChunk, 0u);
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, 2 * kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(va + kChunk, 2 * kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(va + kChunk, 2 * kChunk));
  unsigned long long flags = 0;
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_CU(cuMemGetAccess(&flags, &loc, va + kChunk));
  EXPECT_EQ(flags, static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_READWRITE));
  auto data = Pattern(2 * kChunk / 4, 9);
  ASSERT_CU(cuMemcpyHtoD(va + kChunk, data.data(), 2 * kChunk));
  ASSERT_CU(Launch(fill(), nullptr, va + kChunk, 42u, static_cast<uint64_t>(16)));
  std::vector<uint32_t> back(data.size());
  ASSERT_CU(cuMemcpyDtoH(back.data(), va + kChunk, 2 * kChunk));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[i], 42u);
  EXPECT_EQ(Checksum(back.data() + 16, (back.size() - 16) * 4),
            Checksum(data.data() + 16, (data.size() - 16) * 4));
  ASSERT_CU(cuMemUnmap(va + kChunk, 2 * kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, 4 * kChunk));
}

TEST_F(SimVmmTest, DataSurvivesUnmapAndRemapAtAnotherAddress) {
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAddressReserve(&a, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&b, kChunk, 0, 0, 0));
  ASSERT_NE(a, b);
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(a, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(a, kChunk));
  auto data = Pattern(kChunk / 4, 3);
  ASSERT_CU(cuMemcpyHtoD(a, data.data(), kChunk));
  ASSERT_CU(cuMemUnmap(a, kChunk));
  EXPECT_EQ(cuMemcpyDtoH(data.data(), a, 16), CUDA_ERROR_INVALID_VALUE);  // a is unmapped now
  ASSERT_CU(cuMemMap(b, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(b, kChunk));
  std::vector<uint32_t> back(kChunk / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, kChunk));
  EXPECT_EQ(Checksum(back.data(), kChunk), Checksum(data.data(), kChunk));
  ASSERT_CU(cuMemUnmap(b, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(a, kChunk));
  ASSERT_CU(cuMemAddressFree(b, kChunk));
}

// Remapping a whole allocation reuses the page tables of its previous mapping (Note [parked
// mappings] in sim/src/physical.h, Note [deferred mappings] in sim/src/address_space.h); none
// of the documented semantics may change.
TEST_F(SimVmmTest, RemappedAllocationKeepsItsBytesAliasesAndAccessRules) {
  CUdeviceptr a, b, c;
  ASSERT_CU(cuMemAddressReserve(&a, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&b, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&c, kChunk, 0, 0, 0));
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(a, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(a, kChunk));
  auto data = Pattern(kChunk / 4, 21);
  ASSERT_CU(cuMemcpyHtoD(a, data.data(), kChunk));
  ASSERT_CU(cuMemUnmap(a, kChunk));
  uint32_t v = 0;
  EXPECT_EQ(cuMemcpyDtoH(&v, a, 4), CUDA_ERROR_INVALID_VALUE);  // a is unmapped
  // Mapped again elsewhere: no access before cuMemSetAccess, the old bytes after it.
  ASSERT_CU(cuMemMap(b, kChunk, 0, h, 0));
  EXPECT_EQ(cuMemcpyHtoD(b, &v, 4), CUDA_ERROR_INVALID_VALUE);
  unsigned long long flags = 1;
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  ASSERT_CU(cuMemGetAccess(&flags, &loc, b));
  EXPECT_EQ(flags, 0u);
  ASSERT_CU(GrantReadWrite(b, kChunk));
  std::vector<uint32_t> back(kChunk / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, kChunk));
  EXPECT_EQ(Checksum(back.data(), kChunk), Checksum(data.data(), kChunk));
  // A second mapping at the same time aliases the first, both ways.
  ASSERT_CU(cuMemMap(c, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(c, kChunk));
  ASSERT_CU(cuMemsetD32(c + 8, 0x5eed5eed, 1));
  ASSERT_CU(cuMemcpyDtoH(&v, b + 8, 4));
  EXPECT_EQ(v, 0x5eed5eedu);
  ASSERT_CU(Launch(write_u32(), nullptr, b + kChunk - 4, 0xb0b0u));
  ASSERT_CU(cuCtxSynchronize());
  ASSERT_CU(cuMemcpyDtoH(&v, c + kChunk - 4, 4));
  EXPECT_EQ(v, 0xb0b0u);
  ASSERT_CU(cuMemUnmap(b, kChunk));
  ASSERT_CU(cuMemUnmap(c, kChunk));
  // Mapped read-only after a read-write mapping: reads see the bytes, writes are refused and
  // a kernel's write faults.
  ASSERT_CU(cuMemMap(a, kChunk, 0, h, 0));
  CUmemAccessDesc ro = {};
  ro.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ro.location.id = 0;
  ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_CU(cuMemSetAccess(a, kChunk, &ro, 1));
  ASSERT_CU(cuMemcpyDtoH(&v, a + 8, 4));
  EXPECT_EQ(v, 0x5eed5eedu);
  EXPECT_EQ(cuMemsetD32(a, 0, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(Launch(write_u32(), nullptr, a + 16, 1u));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuMemUnmap(a, kChunk);
  cuMemRelease(h);
  for (CUdeviceptr p : {a, b, c}) cuMemAddressFree(p, kChunk);
}

TEST_F(SimVmmTest, RemappedButNotAccessibleAllocationFaultsKernels) {
  CUdeviceptr a, b;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(MapReadWriteChunk(&a, &h));
  ASSERT_CU(cuMemsetD32(a, 7, kChunk / 4));
  ASSERT_CU(cuMemUnmap(a, kChunk));
  ASSERT_CU(cuMemAddressReserve(&b, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemMap(b, kChunk, 0, h, 0));  // no cuMemSetAccess
  ASSERT_CU(Launch(write_u32(), nullptr, b, 5u));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuMemUnmap(b, kChunk);
  cuMemRelease(h);
  cuMemAddressFree(a, kChunk);
  cuMemAddressFree(b, kChunk);
}

TEST_F(SimVmmTest, PartOfARemappedAllocationMapsTheSameBytes) {
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAddressReserve(&a, 2 * kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&b, 2 * kChunk, 0, 0, 0));
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, 2 * kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(a, 2 * kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(a, 2 * kChunk));
  auto data = Pattern(2 * kChunk / 4, 5);
  ASSERT_CU(cuMemcpyHtoD(a, data.data(), 2 * kChunk));
  ASSERT_CU(cuMemUnmap(a, 2 * kChunk));
  // The second half alone, then the whole allocation, in two access steps.
  ASSERT_CU(cuMemMap(b + kChunk, kChunk, kChunk, h, 0));
  ASSERT_CU(GrantReadWrite(b + kChunk, kChunk));
  std::vector<uint32_t> back(kChunk / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), b + kChunk, kChunk));
  EXPECT_EQ(Checksum(back.data(), kChunk), Checksum(data.data() + kChunk / 4, kChunk));
  ASSERT_CU(cuMemMap(a, 2 * kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(a, kChunk));
  EXPECT_EQ(cuMemcpyDtoH(back.data(), a + kChunk, 4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(GrantReadWrite(a + kChunk, kChunk));
  ASSERT_CU(cuMemcpyDtoH(back.data(), a, kChunk));
  EXPECT_EQ(Checksum(back.data(), kChunk), Checksum(data.data(), kChunk));
  ASSERT_CU(cuMemsetD32(a + kChunk, 0x77, 1));
  uint32_t v = 0;
  ASSERT_CU(cuMemcpyDtoH(&v, b + kChunk, 4));
  EXPECT_EQ(v, 0x77u);
  ASSERT_CU(cuMemUnmap(a, 2 * kChunk));
  ASSERT_CU(cuMemUnmap(b + kChunk, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(a, 2 * kChunk));
  ASSERT_CU(cuMemAddressFree(b, 2 * kChunk));
}

// Whether this kernel can move shared mappings and leave the source mapped (Linux >= 5.13),
// which parked mappings need.
bool KernelMovesSharedMappings() {
  const int fd = memfd_create("probe", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 4096) != 0) return false;
  void* from = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  void* to = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  close(fd);
  const bool moved =
      from != MAP_FAILED && to != MAP_FAILED &&
      mremap(from, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED | 4 /* DONTUNMAP */, to) != MAP_FAILED;
  if (from != MAP_FAILED) munmap(from, 4096);
  if (to != MAP_FAILED) munmap(to, 4096);
  return moved;
}

long MinorFaults() {
  rusage usage = {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

TEST_F(SimVmmTest, RemappedAllocationIsNotFaultedInPageByPageAgain) {
  if (!KernelMovesSharedMappings()) GTEST_SKIP() << "no MREMAP_DONTUNMAP for shared mappings";
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan's shadow memory faults on first touch (2049 faults per 2 MiB)";
#endif
  CUdeviceptr a, b;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(MapReadWriteChunk(&a, &h));
  auto data = Pattern(kChunk / 4, 8);
  ASSERT_CU(cuMemcpyHtoD(a, data.data(), kChunk));  // every page faulted in once
  ASSERT_CU(cuMemUnmap(a, kChunk));
  ASSERT_CU(cuMemAddressReserve(&b, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemMap(b, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(b, kChunk));
  const long before = MinorFaults();
  ASSERT_CU(cuMemcpyHtoD(b, data.data(), kChunk));
  // The moved page tables need no fault (without them a fresh mapping faulted once per 4 KiB
  // page, 512, before its page tables were populated on cuMemSetAccess); ASan's shadow of the
  // 2 MiB adds up to 64 first-touch faults.
  EXPECT_LT(MinorFaults() - before, 128);
  ASSERT_CU(cuMemUnmap(b, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(a, kChunk));
  ASSERT_CU(cuMemAddressFree(b, kChunk));
}

TEST_F(SimVmmTest, MappedButNotAccessibleMemoryIsRejectedByCopiesAndFaultsKernels) {
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, kChunk, 0, 0, 0));
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  ASSERT_CU(cuMemMap(va, kChunk, 0, h, 0));  // no cuMemSetAccess yet
  uint32_t v = 1;
  EXPECT_EQ(cuMemcpyHtoD(va, &v, 4), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(Launch(write_u32(), nullptr, va, 5u));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(cuMemcpyHtoD(va, &v, 4), CUDA_ERROR_ILLEGAL_ADDRESS);  // sticky from now on
  cuMemUnmap(va, kChunk);
  cuMemRelease(h);
  cuMemAddressFree(va, kChunk);
}

TEST_F(SimVmmTest, ReadOnlyAccessAllowsReadsAndRejectsWrites) {
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(MapReadWriteChunk(&va, &h));
  const uint32_t magic = 0x600dcafe;
  ASSERT_CU(cuMemcpyHtoD(va, &magic, 4));
  CUmemAccessDesc ro = {};
  ro.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ro.location.id = 0;
  ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
  ASSERT_CU(cuMemSetAccess(va, kChunk, &ro, 1));
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, va, 4));
  EXPECT_EQ(back, magic);
  EXPECT_EQ(cuMemsetD32(va, 0, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(Launch(write_u32(), nullptr, va, 1u));
  EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  cuMemUnmap(va, kChunk);
  cuMemRelease(h);
  cuMemAddressFree(va, kChunk);
}

TEST_F(SimVmmTest, DeviceLocatedPhysicalMemoryCountsAgainstCapacity) {
  const size_t before = FreeBytes();
  CUmemAllocationProp prop = DeviceProp();
  std::vector<CUmemGenericAllocationHandle> handles;
  CUmemGenericAllocationHandle h;
  while (cuMemCreate(&h, 16 * kChunk, &prop, 0) == CUDA_SUCCESS) handles.push_back(h);
  EXPECT_EQ(handles.size(), before / (16 * kChunk));
  EXPECT_EQ(cuMemCreate(&h, 16 * kChunk, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, before % (16 * kChunk) + 4096), CUDA_ERROR_OUT_OF_MEMORY);
  for (auto x : handles) ASSERT_CU(cuMemRelease(x));
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(SimVmmTest, HostNumaPhysicalMemoryIsMappableAndFreeOfDeviceCapacity) {
  const size_t before = FreeBytes();
  CUmemAllocationProp prop = HostNumaProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, 512u << 20, &prop, 0));  // twice the device's capacity
  EXPECT_EQ(FreeBytes(), before);
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, 512u << 20, 0, 0, 0));
  ASSERT_CU(cuMemMap(va, 512u << 20, 0, h, 0));
  ASSERT_CU(GrantReadWrite(va, 512u << 20));
  ASSERT_CU(Launch(fill(), nullptr, va + (300u << 20), 77u, static_cast<uint64_t>(1024)));
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, va + (300u << 20) + 1020 * 4, 4));
  EXPECT_EQ(back, 77u);
  CUmemAllocationProp got = {};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST_NUMA);
  ASSERT_CU(cuMemUnmap(va, 512u << 20));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, 512u << 20));
}

TEST_F(SimVmmTest, ReleasedMemoryStaysAliveWhileMapped) {
  const size_t before = FreeBytes();
  CUdeviceptr va;
  CUmemGenericAllocationHandle h;
  ASSERT_NO_FATAL_FAILURE(MapReadWriteChunk(&va, &h));
  ASSERT_CU(cuMemRelease(h));  // allowed while mapped; the memory lives until unmapped
  EXPECT_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemsetD32(va, 0x01020304, kChunk / 4));
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, va + kChunk - 4, 4));
  EXPECT_EQ(back, 0x01020304u);
  EXPECT_EQ(FreeBytes(), before - kChunk);
  CUmemGenericAllocationHandle again;
  ASSERT_CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 100)));
  EXPECT_EQ(again, h);
  ASSERT_CU(cuMemRelease(again));
  ASSERT_CU(cuMemUnmap(va, kChunk));
  EXPECT_EQ(FreeBytes(), before);  // last mapping gone: capacity returned
  ASSERT_CU(cuMemAddressFree(va, kChunk));
}

TEST_F(SimVmmTest, MapAndUnmapEnforceTheDocumentedPreconditions) {
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, 4 * kChunk, 0, 0, 0));
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  EXPECT_EQ(cuMemCreate(&h, kChunk + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_CU(cuMemCreate(&h, 2 * kChunk, &prop, 0));
  EXPECT_EQ(cuMemMap(va + 4096, kChunk, 0, h, 0), CUDA_ERROR_INVALID_VALUE);    // misaligned
  EXPECT_EQ(cuMemMap(va, 3 * kChunk, 0, h, 0), CUDA_ERROR_INVALID_VALUE);       // > handle
  EXPECT_EQ(cuMemMap(va, kChunk, 2 * kChunk, h, 0), CUDA_ERROR_INVALID_VALUE);  // offset
  EXPECT_EQ(cuMemMap(va + 3 * kChunk, 2 * kChunk, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // past
  ASSERT_CU(cuMemMap(va, kChunk, kChunk, h, 0));                       // second half of the handle
  EXPECT_EQ(cuMemMap(va, kChunk, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // already mapped
  EXPECT_EQ(cuMemUnmap(va, 2 * kChunk), CUDA_ERROR_INVALID_VALUE);     // not all mapped
  EXPECT_EQ(GrantReadWrite(va + kChunk, kChunk), CUDA_ERROR_INVALID_VALUE);     // unmapped range
  EXPECT_EQ(cuMemMap(va, kChunk, 0, 0xdead0000, 0), CUDA_ERROR_INVALID_VALUE);  // bad handle
  EXPECT_EQ(cuMemAddressFree(va, kChunk), CUDA_ERROR_INVALID_VALUE);            // size must match
  ASSERT_CU(cuMemUnmap(va, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, 4 * kChunk));
}

TEST_F(SimVmmTest, ReservationHonoursAFreeAddressHint) {
  CUdeviceptr a;
  ASSERT_CU(cuMemAddressReserve(&a, 8 * kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressFree(a, 8 * kChunk));
  CUdeviceptr b;
  ASSERT_CU(cuMemAddressReserve(&b, 2 * kChunk, 0, a + 2 * kChunk, 0));
  EXPECT_EQ(b, a + 2 * kChunk);
  CUdeviceptr c;
  ASSERT_CU(cuMemAddressReserve(&c, 2 * kChunk, 0, a + 2 * kChunk, 0));  // taken: elsewhere
  EXPECT_NE(c, b);
  ASSERT_CU(cuMemAddressFree(b, 2 * kChunk));
  ASSERT_CU(cuMemAddressFree(c, 2 * kChunk));
}

TEST_F(SimVmmTest, ExportedFileDescriptorSharesThePhysicalPages) {
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  int fd = -1;
  ASSERT_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  EXPECT_GE(fd, 0);
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemMap(va, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(va, kChunk));
  const uint32_t v = 0xfeedf00d;
  ASSERT_CU(cuMemcpyHtoD(va + 64, &v, 4));
  uint32_t read_back = 0;
  ASSERT_EQ(pread(fd, &read_back, 4, 64), 4);
  EXPECT_EQ(read_back, v);
  close(fd);
  ASSERT_CU(cuMemUnmap(va, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, kChunk));
}

TEST_F(SimVmmTest, OnlyHandleTypesRequestedAtCreationAreExported) {
  CUmemAllocationProp prop = DeviceProp();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fd, -1);
  ASSERT_CU(cuMemRelease(h));
}

TEST_F(SimVmmTest, ImportedFileDescriptorMapsTheSameMemoryWithoutNewCharge) {
  CUmemAllocationProp prop = DeviceProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, kChunk, &prop, 0));
  int fd = -1;
  ASSERT_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  const size_t before = FreeBytes();
  CUmemGenericAllocationHandle imported;
  ASSERT_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t{fd}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  close(fd);  // the import does not depend on the caller's descriptor
  EXPECT_EQ(FreeBytes(), before);
  CUmemAllocationProp got = {};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, imported));
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_DEVICE);
  EXPECT_EQ(got.location.id, 0);
  CUdeviceptr a, b;
  ASSERT_CU(cuMemAddressReserve(&a, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemAddressReserve(&b, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemMap(a, kChunk, 0, h, 0));
  ASSERT_CU(cuMemMap(b, kChunk, 0, imported, 0));
  ASSERT_CU(GrantReadWrite(a, kChunk));
  ASSERT_CU(GrantReadWrite(b, kChunk));
  auto data = Pattern(kChunk / 4, 11);
  ASSERT_CU(cuMemcpyHtoD(a, data.data(), kChunk));
  std::vector<uint32_t> back(kChunk / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), b, kChunk));  // written through a, read through b
  EXPECT_EQ(Checksum(back.data(), kChunk), Checksum(data.data(), kChunk));
  ASSERT_CU(cuMemUnmap(a, kChunk));
  ASSERT_CU(cuMemUnmap(b, kChunk));
  ASSERT_CU(cuMemRelease(imported));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(a, kChunk));
  ASSERT_CU(cuMemAddressFree(b, kChunk));
}

TEST_F(SimVmmTest, ForeignSharedMemoryImportsAsHostMemory) {
  const int fd = memfd_create("foreign-slab", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kChunk), 0);
  const uint32_t magic = 0xabad1dea;
  ASSERT_EQ(pwrite(fd, &magic, 4, 4096), 4);
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(intptr_t{fd}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUmemAllocationProp got = {};
  ASSERT_CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  EXPECT_EQ(got.location.type, CU_MEM_LOCATION_TYPE_HOST);
  CUdeviceptr va;
  ASSERT_CU(cuMemAddressReserve(&va, kChunk, 0, 0, 0));
  ASSERT_CU(cuMemMap(va, kChunk, 0, h, 0));
  ASSERT_CU(GrantReadWrite(va, kChunk));
  uint32_t back = 0;
  ASSERT_CU(cuMemcpyDtoH(&back, va + 4096, 4));
  EXPECT_EQ(back, magic);
  ASSERT_CU(cuMemUnmap(va, kChunk));
  ASSERT_CU(cuMemRelease(h));
  ASSERT_CU(cuMemAddressFree(va, kChunk));
  ASSERT_EQ(ftruncate(fd, 4096), 0);  // not a multiple of the granularity any more
  EXPECT_EQ(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(intptr_t{fd}),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE);
  close(fd);
}

}  // namespace
}  // namespace memsim_test

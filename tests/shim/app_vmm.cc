// Device memory the program creates and maps itself (cuMemAddressReserve,
// cuMemCreate, cuMemMap, cuMemSetAccess), as PyTorch's expandable segments
// do, at FACTOR times the device: every handle is filled from the host,
// changed by a kernel, read across the boundary of two mappings by a copy
// and checked by checksum (a kernel's FNV-1a against the host's); then the
// handles are unmapped and released in both orders (data of a released but
// still mapped handle intact), a sub-range unmap is tried, memory is mapped
// again into the freed space and checked. Prints one line per result.
//
// Usage: app_vmm KERNELS.so DEVICE_BYTES [FACTOR]
// Exit: 0 every check held, 1 a check failed or a driver call failed
// unexpectedly, 3 out of memory.
#include <cuda.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/shim/cuda_check.h"
#include "tests/shim/train_kernels.h"

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) ++failures;
}

uint64_t Fnv(const unsigned char* x, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i) h = (h ^ x[i]) * 1099511628211ull;
  return h;
}

// The bytes handle `i` is filled with (generation `gen`).
void Pattern(uint64_t i, uint64_t gen, std::vector<unsigned char>* out) {
  uint64_t x = 0x9e3779b97f4a7c15ull * (i + 1) + gen;
  for (size_t w = 0; w + 8 <= out->size(); w += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out->data() + w, &x, 8);
  }
}

// bytes_mix (tests/shim/test_kernels.cc) on the host.
void Mix(std::vector<unsigned char>* x, uint32_t k) {
  for (unsigned char& b : *x) b = static_cast<unsigned char>(b * 3u + k);
}

struct Region {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr ptr = 0;
  bool mapped = false;
  std::vector<unsigned char> expected;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s KERNELS.so DEVICE_BYTES [FACTOR]\n", argv[0]);
    return 2;
  }
  const uint64_t device = std::strtoull(argv[2], nullptr, 10);
  const uint64_t factor = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 3;
  SetUpPrimaryContext();
  CUmodule mod;
  CHECK_CU(cuModuleLoad(&mod, argv[1]));
  CUfunction mix, fnv;
  CHECK_CU(cuModuleGetFunction(&mix, mod, "bytes_mix"));
  CHECK_CU(cuModuleGetFunction(&fnv, mod, "fnv_bytes"));
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // as PyTorch asks
  size_t granularity = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const uint64_t handle_bytes = 4 * granularity;
  const uint64_t count = (factor * device + handle_bytes - 1) / handle_bytes;
  std::printf("handles %" PRIu64 " of %" PRIu64 " bytes: %" PRIu64 " bytes\n", count, handle_bytes,
              count * handle_bytes);

  CUdeviceptr base;
  const uint64_t reserved = (count + 2) * handle_bytes;
  CHECK_CU(cuMemAddressReserve(&base, reserved, 0, 0, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<Region> r(count);
  auto map = [&](uint64_t i, uint64_t gen) {
    CHECK_CU(cuMemCreate(&r[i].handle, handle_bytes, &prop, 0));
    r[i].ptr = base + i * handle_bytes;
    CHECK_CU(cuMemMap(r[i].ptr, handle_bytes, 0, r[i].handle, 0));
    CHECK_CU(cuMemSetAccess(r[i].ptr, handle_bytes, &access, 1));
    r[i].mapped = true;
    r[i].expected.resize(handle_bytes);
    Pattern(i, gen, &r[i].expected);
    CHECK_CU(cuMemcpyHtoDAsync(r[i].ptr, r[i].expected.data(), handle_bytes, s));
    uint64_t off = 0, len = handle_bytes;
    uint32_t k = static_cast<uint32_t>(i + gen);
    Launch(mix, s, {&r[i].ptr, &off, &len, &k});
    CHECK_CU(cuStreamSynchronize(s));  // the copy has read the host bytes
    Mix(&r[i].expected, k);
  };
  CUdeviceptr sums;
  CHECK_CU(cuMemAlloc(&sums, count * sizeof(uint64_t)));
  size_t free_before = 0, total = 0;
  CHECK_CU(cuMemGetInfo(&free_before, &total));
  // Every mapped handle's checksum, computed by a kernel, against the host's.
  auto verify = [&](const char* what) {
    for (uint64_t i = 0; i < count; ++i) {
      if (!r[i].mapped) continue;
      CUdeviceptr out = sums + i * sizeof(uint64_t);
      Launch(fnv, s, {&out, &r[i].ptr, const_cast<uint64_t*>(&handle_bytes)});
    }
    std::vector<uint64_t> got(count);
    CHECK_CU(cuStreamSynchronize(s));
    CHECK_CU(cuMemcpyDtoH(got.data(), sums, count * sizeof(uint64_t)));
    bool ok = true;
    for (uint64_t i = 0; i < count; ++i) {
      if (r[i].mapped) ok &= got[i] == Fnv(r[i].expected.data(), handle_bytes);
    }
    Expect(ok, what);
  };

  for (uint64_t i = 0; i < count; ++i) map(i, 0);
  verify("checksums of every handle at the full footprint");

  // A copy across the boundary of two mappings (one contiguous range to the program).
  {
    std::vector<unsigned char> got(handle_bytes);
    const uint64_t i = count / 2;
    CUdeviceptr tmp;
    CHECK_CU(cuMemAlloc(&tmp, handle_bytes));
    CHECK_CU(cuMemcpyDtoD(tmp, r[i].ptr + handle_bytes / 2, handle_bytes));
    CHECK_CU(cuMemcpyDtoH(got.data(), tmp, handle_bytes));
    const bool ok =
        std::memcmp(got.data(), r[i].expected.data() + handle_bytes / 2, handle_bytes / 2) == 0 &&
        std::memcmp(got.data() + handle_bytes / 2, r[i + 1].expected.data(), handle_bytes / 2) == 0;
    Expect(ok, "a copy across two adjacent mappings");
    CHECK_CU(cuMemFree(tmp));
  }

  // Queries on the program's own memory.
  {
    const uint64_t i = 1;
    CUmemGenericAllocationHandle retained = 0;
    CHECK_CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(r[i].ptr + 4096)));
    Expect(retained == r[i].handle, "cuMemRetainAllocationHandle returns the mapped handle");
    CHECK_CU(cuMemRelease(retained));
    CUmemAllocationProp got = {};
    CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&got, r[i].handle));
    Expect(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0 &&
               got.requestedHandleTypes == prop.requestedHandleTypes,
           "cuMemGetAllocationPropertiesFromHandle answers the creation properties");
    CUdeviceptr range_base = 0;
    size_t range_size = 0;
    CHECK_CU(cuMemGetAddressRange(&range_base, &range_size, r[i].ptr + 4096));
    Expect(range_base == r[i].ptr && range_size == handle_bytes,
           "cuMemGetAddressRange answers the mapping");
    CUdeviceptr start = 0, mapping_base = 0;
    size_t size = 0, mapping_size = 0;
    unsigned long long types = 0;
    CHECK_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, r[i].ptr));
    CHECK_CU(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, r[i].ptr));
    CHECK_CU(cuPointerGetAttribute(&mapping_base, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR,
                                   r[i].ptr + 4096));
    CHECK_CU(cuPointerGetAttribute(&mapping_size, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, r[i].ptr));
    CHECK_CU(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, r[i].ptr));
    Expect(start == base && size == reserved, "the range attributes name the reservation");
    Expect(mapping_base == r[i].ptr && mapping_size == handle_bytes,
           "the mapping attributes name the mapping");
    Expect(types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
           "the allowed handle types are those requested");
    Expect(cuMemFree(r[i].ptr) != CUDA_SUCCESS, "cuMemFree refuses mapped VMM memory");
    // Exported (the shim pins the handle in driver memory), imported again and mapped at a
    // second address: the same bytes.
    int fd = -1;
    const CUresult exported =
        cuMemExportToShareableHandle(&fd, r[i].handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    std::printf("export %d\n", static_cast<int>(exported));
    if (exported == CUDA_SUCCESS) {
      CUmemGenericAllocationHandle imported;
      CHECK_CU(cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t{fd}),
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      CUdeviceptr alias;
      CHECK_CU(cuMemAddressReserve(&alias, handle_bytes, 0, 0, 0));
      CHECK_CU(cuMemMap(alias, handle_bytes, 0, imported, 0));
      CHECK_CU(cuMemSetAccess(alias, handle_bytes, &access, 1));
      std::vector<unsigned char> got(handle_bytes);
      CHECK_CU(cuMemcpyDtoH(got.data(), alias, handle_bytes));
      Expect(got == r[i].expected, "the exported handle imported again holds its bytes");
      CHECK_CU(cuMemUnmap(alias, handle_bytes));
      CHECK_CU(cuMemRelease(imported));
      CHECK_CU(cuMemAddressFree(alias, handle_bytes));
      close(fd);
    }
  }

  // A sub-range of one mapping: the documentation refuses it.
  const CUresult partial = cuMemUnmap(r[2].ptr + granularity, granularity);
  std::printf("partial_unmap %d\n", static_cast<int>(partial));
  if (partial == CUDA_SUCCESS) {  // a driver that allows it: map the part again (same bytes)
    CHECK_CU(cuMemMap(r[2].ptr + granularity, granularity, granularity, r[2].handle, 0));
    CHECK_CU(cuMemSetAccess(r[2].ptr + granularity, granularity, &access, 1));
  }
  verify("checksums after the refused partial unmap");

  // Released first (the mapping keeps the memory), then unmapped; and the other order.
  for (uint64_t i = 0; i < count; i += 4) CHECK_CU(cuMemRelease(r[i].handle));
  verify("checksums with every fourth handle released but still mapped");
  for (uint64_t i = 0; i < count; i += 4) {
    CHECK_CU(cuMemUnmap(r[i].ptr, handle_bytes));
    r[i].mapped = false;
  }
  for (uint64_t i = 1; i + 1 < count; i += 4) {  // two adjacent mappings in one call
    CHECK_CU(cuMemUnmap(r[i].ptr, 2 * handle_bytes));
    CHECK_CU(cuMemRelease(r[i].handle));
    CHECK_CU(cuMemRelease(r[i + 1].handle));
    r[i].mapped = r[i + 1].mapped = false;
  }
  verify("checksums of the handles still mapped after unmapping the others");

  // The freed space mapped again, with new handles and new bytes.
  for (uint64_t i = 0; i < count; ++i) {
    if (!r[i].mapped) map(i, 1);
  }
  verify("checksums after mapping new handles into the freed space");

  for (uint64_t i = 0; i < count; ++i) {
    CHECK_CU(cuMemUnmap(r[i].ptr, handle_bytes));
    CHECK_CU(cuMemRelease(r[i].handle));
  }
  CHECK_CU(cuMemAddressFree(base, reserved));
  CHECK_CU(cuCtxSynchronize());
  size_t free_after = 0;
  CHECK_CU(cuMemGetInfo(&free_after, &total));
  CHECK_CU(cuMemFree(sums));
  Expect(free_after == free_before, "every byte is free again after unmap, release and free");
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}

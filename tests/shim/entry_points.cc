// Every hooked entry point at every version cudaTypedefs.h lists: the
// lookups hand out the shim's hook of exactly the flavour that the generated
// table names (Note [entry-point substitution] in shim/hooks/hooks_lookup.cc),
// and that flavour has the ABI of the version's PFN typedef (checked at
// compile time). Then an oversubscribed run through entry points looked up
// at old versions (cuMemAlloc at 3020, cuLaunchKernel at 4000 and its
// per-thread flavour at 7000, cuMemCreate at 10020) computes the right
// checksums.
//
// Usage: entry_points LIBMEMSHIM KERNELS.so DEVICE_BYTES
// Prints one "wrong ..." line per lookup that answered another flavour, then
// "lookups N wrong M unanswered U", "legacy_alloc R" and
// "blocks B mismatches K".
#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "shim/hooks/hook_list.h"
#include "tests/shim/cuda_check.h"

namespace {

// The canonical spelling of T inside this function's signature (a function
// type spelled through a typedef and through decltype reads the same).
template <typename T>
constexpr std::string_view Abi() {
  return __PRETTY_FUNCTION__;
}

struct Row {
  std::string_view base;
  int version;
  std::string_view symbol;
  bool per_thread;
  std::string_view abi;  // of the version's PFN typedef
};
#define MEMVIRT_ENTRY_POINT(base, version, symbol, per_thread, pfn) \
  Row{#base, version, #symbol, per_thread != 0, Abi<pfn>()},
constexpr Row kRows[] = {
#include "shim/driver/cuda_entry_points.inc"
};
#undef MEMVIRT_ENTRY_POINT

struct Hook {
  std::string_view name;
  std::string_view abi;
};
#define MEMVIRT_HOOK(name) Hook{#name, Abi<decltype(&::name)>()},
constexpr Hook kHooks[] = {MEMSHIM_HOOKED_FUNCTIONS(MEMVIRT_HOOK)};
#undef MEMVIRT_HOOK

constexpr const Row* RowOf(std::string_view symbol) {
  for (const Row& r : kRows) {
    if (r.symbol == symbol) return &r;
  }
  return nullptr;
}

constexpr bool Hooked(std::string_view symbol) {
  for (const Hook& h : kHooks) {
    if (h.name == symbol) return true;
  }
  return false;
}

constexpr bool HookedBase(std::string_view base) {
  for (const Row& r : kRows) {
    if (r.base == base && Hooked(r.symbol)) return true;
  }
  return false;
}

// Index of the first hook whose prototype is not its flavour's PFN typedef (or
// that the table lacks); -1 if none.
constexpr int FirstHookWithAnotherAbi() {
  for (int i = 0; i < static_cast<int>(std::size(kHooks)); ++i) {
    const Row* r = RowOf(kHooks[i].name);
    if (r == nullptr || r->abi != kHooks[i].abi) return i;
  }
  return -1;
}

// Index of the first row that is a flavour of a hooked name but not hooked; -1 if none.
constexpr int FirstUnhookedFlavour() {
  for (int i = 0; i < static_cast<int>(std::size(kRows)); ++i) {
    if (HookedBase(kRows[i].base) && !Hooked(kRows[i].symbol)) return i;
  }
  return -1;
}

static_assert(FirstHookWithAnotherAbi() == -1, "a hook's prototype is not its PFN typedef");
static_assert(FirstUnhookedFlavour() == -1, "a flavour of a hooked entry point is not hooked");

void* g_shim = nullptr;
void* g_libcuda = nullptr;
PFN_cuGetProcAddress_v11030 g_get_proc = nullptr;
PFN_cuGetProcAddress_v12000 g_get_proc_v2 = nullptr;
int g_lookups = 0, g_wrong = 0, g_unanswered = 0;

std::string NameOf(void* fn) {
  Dl_info info;
  if (fn == nullptr) return "null";
  if (dladdr(fn, &info) == 0 || info.dli_sname == nullptr) return "unknown";
  const bool shim = info.dli_fname != nullptr && std::strstr(info.dli_fname, "libmemshim");
  return std::string(shim ? "shim:" : "driver:") + info.dli_sname;
}

void Expect(const char* how, const Row& want, int version, bool per_thread, void* got) {
  ++g_lookups;
  void* hook = dlsym(g_shim, std::string(want.symbol).c_str());
  if (got != nullptr && got == hook) return;
  ++g_wrong;
  std::printf("wrong %s %.*s version %d per_thread %d: got %s want shim:%.*s\n", how,
              static_cast<int>(want.base.size()), want.base.data(), version, per_thread ? 1 : 0,
              NameOf(got).c_str(), static_cast<int>(want.symbol.size()), want.symbol.data());
}

// Looks `want.base` up at `version` both ways and expects `want`'s hook.
void CheckLookup(const Row& want, int version, bool per_thread) {
  const std::string base(want.base);
  const cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                      : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  void* fn = nullptr;
  CUresult r = g_get_proc(base.c_str(), &fn, version, flags);
  if (r != CUDA_SUCCESS) {
    ++g_unanswered;
    std::printf("unanswered cuGetProcAddress %s version %d: %d\n", base.c_str(), version, r);
  } else {
    Expect("cuGetProcAddress", want, version, per_thread, fn);
  }
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  fn = nullptr;
  r = g_get_proc_v2(base.c_str(), &fn, version, flags, &status);
  if (r != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS) {
    ++g_unanswered;
    std::printf("unanswered cuGetProcAddress_v2 %s version %d: %d\n", base.c_str(), version, r);
  } else {
    Expect("cuGetProcAddress_v2", want, version, per_thread, fn);
  }
}

void CheckEveryHookedFlavour() {
  for (const Row& row : kRows) {
    if (!HookedBase(row.base)) continue;
    // At the version that introduced it, a flavour is what the lookup means.
    CheckLookup(row, row.version, row.per_thread);
    // dlsym names the flavour itself.
    Expect("dlsym", row, row.version, row.per_thread,
           dlsym(g_libcuda, std::string(row.symbol).c_str()));
  }
  // At the toolkit's version: the newest flavour of each kind; a per-thread
  // request for a name without a per-thread flavour gets the plain one.
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const Row& row = kRows[i];
    const bool last_of_base = i + 1 == std::size(kRows) || kRows[i + 1].base != row.base;
    if (!HookedBase(row.base) || !last_of_base) continue;
    const Row* newest_plain = nullptr;
    const Row* newest_per_thread = nullptr;
    for (const Row& r : kRows) {
      if (r.base != row.base) continue;
      (r.per_thread ? newest_per_thread : newest_plain) = &r;
    }
    CheckLookup(*newest_plain, CUDA_VERSION, false);
    CheckLookup(newest_per_thread != nullptr ? *newest_per_thread : *newest_plain, CUDA_VERSION,
                true);
  }
}

template <typename T>
T Get(const char* name, int version, bool per_thread = false) {
  void* fn = nullptr;
  CHECK_CU(g_get_proc(name, &fn, version,
                      per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0));
  return reinterpret_cast<T>(fn);
}

uint64_t Fnv(const std::vector<unsigned char>& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

// Oversubscribes the device through entry points looked up at old versions.
int RunOldVersions(const char* kernels, uint64_t device_bytes) {
  CHECK_CU(Get<PFN_cuInit_v2000>("cuInit", 2000)(0));
  CUdevice dev;
  CHECK_CU(Get<PFN_cuDeviceGet_v2000>("cuDeviceGet", 2000)(&dev, 0));
  CUcontext ctx;
  CHECK_CU(Get<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain", 7000)(&ctx, dev));
  CHECK_CU(Get<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000)(ctx));
  CUmodule mod;
  CHECK_CU(Get<PFN_cuModuleLoad_v2000>("cuModuleLoad", 2000)(&mod, kernels));
  CUfunction fnv;
  CHECK_CU(Get<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction", 2000)(&fnv, mod, "fnv_bytes"));
  auto alloc = Get<PFN_cuMemAlloc_v3020>("cuMemAlloc", 3020);
  auto alloc32 = Get<PFN_cuMemAlloc_v2000>("cuMemAlloc", 2000);
  auto free_block = Get<PFN_cuMemFree_v3020>("cuMemFree", 3020);
  auto htod = Get<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD", 3020);
  auto dtoh_ptds = Get<PFN_cuMemcpyDtoH_v7000_ptds>("cuMemcpyDtoH", 7000, true);
  auto launch = Get<PFN_cuLaunchKernel_v4000>("cuLaunchKernel", 4000);
  auto launch_ptsz = Get<PFN_cuLaunchKernel_v7000_ptsz>("cuLaunchKernel", 7000, true);
  auto create = Get<PFN_cuMemCreate_v10020>("cuMemCreate", 10020);
  auto release = Get<PFN_cuMemRelease_v10020>("cuMemRelease", 10020);
  auto sync = Get<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize", 2000);

  CUdeviceptr_v1 low = 0;
  std::printf("legacy_alloc %d\n", static_cast<int>(alloc32(&low, 4096)));

  // Physical memory of the program's own, created at 10020 (counted by the shim).
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemGenericAllocationHandle own;
  CHECK_CU(create(&own, 2ull << 20, &prop, 0));

  constexpr uint64_t kBlock = 8ull << 20;
  const int blocks = static_cast<int>(3 * device_bytes / kBlock);
  std::vector<CUdeviceptr> ptrs(blocks);
  std::vector<uint64_t> expected(blocks);
  std::vector<unsigned char> host(kBlock);
  std::mt19937_64 rng(7);
  for (int i = 0; i < blocks; ++i) {
    CHECK_CU(alloc(&ptrs[i], kBlock));
    for (auto& b : host) b = static_cast<unsigned char>(rng());
    expected[i] = Fnv(host);
    CHECK_CU(htod(ptrs[i], host.data(), kBlock));
  }
  CUdeviceptr out;
  CHECK_CU(alloc(&out, sizeof(uint64_t)));
  int mismatches = 0;
  for (int i = blocks - 1; i >= 0; --i) {
    uint64_t n = kBlock;
    void* args[] = {&out, &ptrs[i], &n};
    if (i % 2 == 0) {
      CHECK_CU(launch(fnv, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
    } else {
      CHECK_CU(launch_ptsz(fnv, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, args, nullptr));
    }
    uint64_t got = 0;
    CHECK_CU(dtoh_ptds(&got, out, sizeof(got)));
    if (got != expected[i]) ++mismatches;
  }
  CHECK_CU(sync());
  for (CUdeviceptr p : ptrs) CHECK_CU(free_block(p));
  CHECK_CU(release(own));
  std::printf("blocks %d mismatches %d\n", blocks, mismatches);
  return mismatches;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  g_shim = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
  g_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (g_shim == nullptr || g_libcuda == nullptr) {
    std::fprintf(stderr, "dlopen: %s (is %s preloaded?)\n", dlerror(), argv[1]);
    return 1;
  }
  g_get_proc = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(g_libcuda, "cuGetProcAddress"));
  g_get_proc_v2 =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(g_libcuda, "cuGetProcAddress_v2"));
  if (g_get_proc == nullptr || g_get_proc_v2 == nullptr) return 1;
  const int mismatches = RunOldVersions(argv[2], std::strtoull(argv[3], nullptr, 10));
  CheckEveryHookedFlavour();
  std::printf("lookups %d wrong %d unanswered %d\n", g_lookups, g_wrong, g_unanswered);
  return g_wrong == 0 && g_unanswered == 0 && mismatches == 0 ? 0 : 1;
}

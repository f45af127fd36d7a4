// Asks the CUDA driver, without the shim, the questions the shim's design depends on, and
// prints the answers as one JSON object: the facts a real GPU answers once, to hold the
// simulated driver to (docs/sim.md) and to check the shim's assumptions (docs/shim.md).
//   - device attributes: VMM, host-NUMA VMM, host NUMA id, pageable memory access;
//   - allocation granularity for device and host-NUMA locations;
//   - a HOST_NUMA physical allocation mapped into the device address space that a kernel
//     reads and writes (the shim's host tier);
//   - entry points: dlsym("cuX") versus cuGetProcAddress at CUDA versions 4000, 10020, 12000
//     and 13000, with and without the per-thread flag;
//   - parameter info asked of a CUfunction and of a CUkernel through both calls;
//   - cuMemMap / cuMemSetAccess / cuMemUnmap latency for 2 MiB chunks;
//   - cuEventQuery from another thread while a stream is captured in global mode, and in
//     relaxed mode alone;
//   - edge answers: cuMemCreate on HOST with and without handle types, cuGetProcAddress for an
//     unknown name and for a version newer than the driver;
//   - whether cuMemMap, cuMemSetAccess and cuMemUnmap wait for a running kernel, and what
//     cuMemUnmap does to a kernel using the range;
//   - costs the shim's paging is made of: cuMemSetAccess over runs of chunks, one cuMemUnmap
//     over several mappings, copy bandwidth between device memory and host-NUMA mappings (the
//     host tier) or pinned host memory, one way and both ways at once.
// Usage: driver_probe            (exit 0 when every probe ran; answers are facts, not checks)
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// Kernels at namespace scope, so that their mangled names are stable (host implementations
// for the simulated driver: tests/cuda/gpu_check_kernels.cc).
__global__ void ProbeTouch(unsigned* p, size_t n, unsigned add) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    p[i] += add;
  }
}

// Runs for `ns` nanoseconds of the GPU's global timer.
__global__ void ProbeSpin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

// Writes p[0] for `ns` nanoseconds of the GPU's global timer.
__global__ void ProbeSpinTouch(volatile unsigned* p, unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    p[0] += 1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__global__ void ProbeParams(int a, float4 b, char c, double2 d, short e) {
  (void)a, (void)b, (void)c, (void)d, (void)e;
}

namespace {

std::string g_json = "{";
bool g_first = true;
int g_errors = 0;

void Field(const std::string& key, const std::string& raw_value) {
  g_json += (g_first ? "\n  \"" : ",\n  \"") + key + "\": " + raw_value;
  g_first = false;
}
void Field(const std::string& key, long long value) { Field(key, std::to_string(value)); }
void FieldStr(const std::string& key, const std::string& value) {
  Field(key, "\"" + value + "\"");
}
std::string Name(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s != nullptr ? s : std::to_string(static_cast<int>(r));
}
// Records a call's result under `key`; counts failures of calls that must work.
bool Must(const std::string& key, CUresult r) {
  if (r != CUDA_SUCCESS) {
    FieldStr(key + "_error", Name(r));
    ++g_errors;
  }
  return r == CUDA_SUCCESS;
}

void ProbeAttributes(CUdevice dev) {
  const struct {
    const char* name;
    CUdevice_attribute attr;
  } attrs[] = {
      {"vmm_supported", CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED},
      {"host_numa_vmm_supported", CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED},
      {"host_numa_id", CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID},
      {"host_vmm_supported", CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED},
      {"pageable_memory_access", CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS},
      {"can_use_stream_mem_ops", CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1},
      {"memory_pools_supported", CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED},
      {"posix_fd_handles", CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED},
      {"compute_capability_major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR},
      {"multiprocessors", CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT},
  };
  for (const auto& a : attrs) {
    int v = -1;
    CUresult r = cuDeviceGetAttribute(&v, a.attr, dev);
    r == CUDA_SUCCESS ? Field(std::string("attr_") + a.name, v)
                      : FieldStr(std::string("attr_") + a.name, Name(r));
  }
  size_t total = 0;
  if (Must("total_mem", cuDeviceTotalMem(&total, dev))) Field("total_mem_bytes", total);
}

CUmemAllocationProp Prop(CUmemLocationType type, int id) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

void ProbeGranularity(CUdevice dev) {
  const struct {
    const char* name;
    CUmemLocationType type;
    int id;
  } locations[] = {{"device", CU_MEM_LOCATION_TYPE_DEVICE, dev},
                   {"host_numa", CU_MEM_LOCATION_TYPE_HOST_NUMA, 0},
                   {"host", CU_MEM_LOCATION_TYPE_HOST, 0}};
  for (const auto& l : locations) {
    CUmemAllocationProp prop = Prop(l.type, l.id);
    for (auto flag : {CU_MEM_ALLOC_GRANULARITY_MINIMUM, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED}) {
      size_t g = 0;
      const std::string key = std::string("granularity_") + l.name +
                              (flag == CU_MEM_ALLOC_GRANULARITY_MINIMUM ? "_min" : "_recommended");
      CUresult r = cuMemGetAllocationGranularity(&g, &prop, flag);
      r == CUDA_SUCCESS ? Field(key, g) : FieldStr(key, Name(r));
    }
  }
  CUmemAllocationProp current = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0);
  CUmemGenericAllocationHandle h;
  CUresult r = cuMemCreate(&h, 2 << 20, &current, 0);
  FieldStr("create_host_numa_current", Name(r));
  if (r == CUDA_SUCCESS) cuMemRelease(h);
}

// The shim's host tier: host-NUMA memory mapped at a device address that a kernel uses.
void ProbeHostNumaMapping(CUdevice dev) {
  const size_t size = 2 << 20;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  CUmemGenericAllocationHandle h;
  CUresult r = cuMemCreate(&h, size, &prop, 0);
  FieldStr("host_numa_create", Name(r));
  if (r != CUDA_SUCCESS) return;
  CUdeviceptr va = 0;
  if (!Must("host_numa_reserve", cuMemAddressReserve(&va, size, 0, 0, 0)) ||
      !Must("host_numa_map", cuMemMap(va, size, 0, h, 0))) {
    cuMemRelease(h);
    return;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (Must("host_numa_set_access", cuMemSetAccess(va, size, &access, 1))) {
    const size_t n = size / sizeof(unsigned);
    std::vector<unsigned> host(n), back(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<unsigned>(i * 7);
    cuMemcpyHtoD(va, host.data(), size);
    ProbeTouch<<<256, 256>>>(reinterpret_cast<unsigned*>(va), n, 5);
    FieldStr("host_numa_launch", cudaGetErrorName(cudaGetLastError()));
    CUresult k = cuCtxSynchronize();
    FieldStr("host_numa_kernel", Name(k));
    if (k == CUDA_SUCCESS && cuMemcpyDtoH(back.data(), va, size) == CUDA_SUCCESS) {
      bool ok = true;
      for (size_t i = 0; i < n; ++i) ok &= back[i] == host[i] + 5;
      Field("host_numa_kernel_result_ok", ok ? "true" : "false");
    }
  }
  cuMemUnmap(va, size);
  cuMemAddressFree(va, size);
  cuMemRelease(h);
}

void ProbeEntryPoints() {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  std::string out = "{";
  bool first = true;
  for (const char* name : {"cuLaunchKernel", "cuMemCreate", "cuMemAlloc", "cuMemcpyHtoD",
                           "cuStreamSynchronize", "cuGetProcAddress"}) {
    void* direct = libcuda != nullptr ? dlsym(libcuda, name) : nullptr;
    std::string row = std::string(first ? "" : ",") + "\"" + name + "\": {\"dlsym\": \"" +
                      std::to_string(reinterpret_cast<uintptr_t>(direct)) + "\"";
    first = false;
    for (int version : {4000, 10020, 12000, 13000}) {
      for (cuuint64_t flags : {CU_GET_PROC_ADDRESS_DEFAULT,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM}) {
        void* fn = nullptr;
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
        CUresult r = cuGetProcAddress(name, &fn, version, flags, &status);
        char key[64];
        std::snprintf(key, sizeof(key), "v%d%s", version,
                      flags == CU_GET_PROC_ADDRESS_DEFAULT ? "" : "_ptds");
        std::string same = fn == direct ? "=dlsym" : "";
        Dl_info info = {};
        const char* symbol = fn != nullptr && dladdr(fn, &info) && info.dli_sname != nullptr
                                 ? info.dli_sname
                                 : "";
        row += std::string(", \"") + key + "\": \"" + (r == CUDA_SUCCESS ? symbol : Name(r)) +
               same + " status=" + std::to_string(status) + "\"";
      }
    }
    out += row + "}";
  }
  Field("entry_points", out + "}");
}

// cudart hands the driver a CUkernel where a CUfunction is expected (cuLaunchKernel); the
// shim asks each for its parameter layout. Records what each call answers for each handle kind.
void ProbeParamInfo() {
  cudaFunction_t fn = nullptr;
  cudaKernel_t kernel = nullptr;
  if (cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(&ProbeParams)) != cudaSuccess ||
      cudaGetKernel(&kernel, reinterpret_cast<const void*>(&ProbeParams)) != cudaSuccess) {
    FieldStr("param_info", "no function or kernel handle");
    ++g_errors;
    return;
  }
  auto describe = [](CUresult (*query)(const void*, size_t, size_t*, size_t*), const void* h) {
    std::string out = "\"";
    for (size_t i = 0; i < 6; ++i) {
      size_t offset = 0, size = 0;
      CUresult r = query(h, i, &offset, &size);
      out += r == CUDA_SUCCESS ? std::to_string(offset) + "/" + std::to_string(size) : Name(r);
      out += i < 5 ? " " : "";
    }
    return out + "\"";
  };
  auto func_info = [](const void* h, size_t i, size_t* o, size_t* s) {
    return cuFuncGetParamInfo(static_cast<CUfunction>(const_cast<void*>(h)), i, o, s);
  };
  auto kernel_info = [](const void* h, size_t i, size_t* o, size_t* s) {
    return cuKernelGetParamInfo(static_cast<CUkernel>(const_cast<void*>(h)), i, o, s);
  };
  Field("param_info_func_on_function", describe(func_info, fn));
  Field("param_info_kernel_on_kernel", describe(kernel_info, kernel));
  Field("param_info_func_on_kernel", describe(func_info, kernel));
  Field("param_info_kernel_on_function", describe(kernel_info, fn));
  Field("function_equals_kernel", fn == reinterpret_cast<cudaFunction_t>(kernel) ? "true" : "false");
}

// Mean microseconds per call of map, set-access and unmap for 2 MiB device chunks.
void ProbeMapLatency(CUdevice dev) {
  const size_t chunk = 2 << 20;
  const int count = 64;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
  CUdeviceptr va = 0;
  if (!Must("latency_reserve", cuMemAddressReserve(&va, chunk * count, 0, 0, 0))) return;
  std::vector<CUmemGenericAllocationHandle> handles(count);
  for (auto& h : handles) {
    if (!Must("latency_create", cuMemCreate(&h, chunk, &prop, 0))) return;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  using Clock = std::chrono::steady_clock;
  double map_us = 0, access_us = 0, unmap_us = 0;
  for (int round = 0; round < 4; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < count; ++i) cuMemMap(va + i * chunk, chunk, 0, handles[i], 0);
    auto t1 = Clock::now();
    for (int i = 0; i < count; ++i) cuMemSetAccess(va + i * chunk, chunk, &access, 1);
    auto t2 = Clock::now();
    for (int i = 0; i < count; ++i) cuMemUnmap(va + i * chunk, chunk);
    auto t3 = Clock::now();
    map_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    access_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
    unmap_us += std::chrono::duration<double, std::micro>(t3 - t2).count();
  }
  const double calls = 4.0 * count;
  Field("map_us", std::to_string(map_us / calls));
  Field("set_access_us", std::to_string(access_us / calls));
  Field("unmap_us", std::to_string(unmap_us / calls));
  for (auto h : handles) cuMemRelease(h);
  cuMemAddressFree(va, chunk * count);
}

// What a second thread's cuEventQuery gets while a stream is captured in global mode, and
// whether the capture survives it (the shim polls events from the application's threads).
void ProbeCaptureQuery(CUcontext ctx) {
  CUstream s;
  CUevent e;
  if (!Must("capture_stream", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) ||
      !Must("capture_event", cuEventCreate(&e, CU_EVENT_DISABLE_TIMING))) {
    return;
  }
  cuEventRecord(e, nullptr);
  cuCtxSynchronize();
  Must("capture_begin", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult query = CUDA_SUCCESS, relaxed = CUDA_SUCCESS;
  std::thread other([&] {
    cuCtxSetCurrent(ctx);
    query = cuEventQuery(e);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cuThreadExchangeStreamCaptureMode(&mode);
    relaxed = cuEventQuery(e);
    cuThreadExchangeStreamCaptureMode(&mode);
  });
  other.join();
  CUgraph graph = nullptr;
  CUresult end = cuStreamEndCapture(s, &graph);
  FieldStr("capture_global_event_query_other_thread", Name(query));
  FieldStr("capture_relaxed_event_query_other_thread", Name(relaxed));
  FieldStr("capture_end_after_queries", Name(end));
  if (graph != nullptr) cuGraphDestroy(graph);
  cuEventDestroy(e);
  cuStreamDestroy(s);
}

// Whether a relaxed-mode query alone (what the shim issues) leaves a global capture valid.
void ProbeRelaxedQueryOnly(CUcontext ctx) {
  CUstream s;
  CUevent e;
  if (!Must("relaxed_stream", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) ||
      !Must("relaxed_event", cuEventCreate(&e, CU_EVENT_DISABLE_TIMING))) {
    return;
  }
  cuEventRecord(e, nullptr);
  cuCtxSynchronize();
  Must("relaxed_begin", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUresult relaxed = CUDA_SUCCESS;
  std::thread other([&] {
    cuCtxSetCurrent(ctx);
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    cuThreadExchangeStreamCaptureMode(&mode);
    relaxed = cuEventQuery(e);
    cuThreadExchangeStreamCaptureMode(&mode);
  });
  other.join();
  CUgraph graph = nullptr;
  CUresult end = cuStreamEndCapture(s, &graph);
  FieldStr("capture_relaxed_only_query", Name(relaxed));
  FieldStr("capture_end_after_relaxed_only", Name(end));
  if (graph != nullptr) cuGraphDestroy(graph);
  cuEventDestroy(e);
  cuStreamDestroy(s);
}

void ProbeEdgeAnswers() {
  for (bool with_fd : {true, false}) {
    CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_HOST, 0);
    if (!with_fd) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CUmemGenericAllocationHandle h;
    CUresult r = cuMemCreate(&h, 2 << 20, &prop, 0);
    FieldStr(with_fd ? "create_host_with_fd" : "create_host", Name(r));
    if (r == CUDA_SUCCESS) cuMemRelease(h);
  }
  int driver = 0;
  cuDriverGetVersion(&driver);
  for (const auto& q : {std::pair<const char*, int>{"proc_address_unknown", 0},
                        std::pair<const char*, int>{"proc_address_newer_than_driver", 1}}) {
    void* fn = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult r = q.second ? cuGetProcAddress("cuInit", &fn, driver + 10, 0, &status)
                          : cuGetProcAddress("cuDoesNotExist", &fn, driver, 0, &status);
    FieldStr(q.first, Name(r) + " status=" + std::to_string(status) +
                          (fn == nullptr ? " null" : " set"));
  }
}

double Micros(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// cuMemSetAccess over runs of 1, 8 and 32 mapped chunks, and one cuMemUnmap over 8 mappings.
void ProbeRangeCosts(CUdevice dev) {
  const size_t chunk = 2 << 20;
  const int count = 32;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUdeviceptr va = 0;
  if (!Must("range_reserve", cuMemAddressReserve(&va, chunk * count, 0, 0, 0))) return;
  std::vector<CUmemGenericAllocationHandle> handles(count);
  for (auto& h : handles) {
    if (!Must("range_create", cuMemCreate(&h, chunk, &prop, 0))) return;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  auto map_all = [&] {
    for (int i = 0; i < count; ++i) cuMemMap(va + i * chunk, chunk, 0, handles[i], 0);
  };
  auto unmap_all = [&] {
    for (int i = 0; i < count; ++i) cuMemUnmap(va + i * chunk, chunk);
  };
  using Clock = std::chrono::steady_clock;
  for (int run : {1, 8, 32}) {
    map_all();
    auto t0 = Clock::now();
    for (int i = 0; i < count; i += run) cuMemSetAccess(va + i * chunk, chunk * run, &access, 1);
    auto t1 = Clock::now();
    Field("set_access_run" + std::to_string(run) + "_us",
          std::to_string(Micros(t0, t1) / (count / run)));
    unmap_all();
  }
  map_all();
  cuMemSetAccess(va, chunk * count, &access, 1);
  auto t0 = Clock::now();
  CUresult r = cuMemUnmap(va, chunk * 8);
  auto t1 = Clock::now();
  FieldStr("unmap_spanning_8_mappings", Name(r));
  if (r == CUDA_SUCCESS) Field("unmap_spanning_8_us", std::to_string(Micros(t0, t1)));
  for (int i = r == CUDA_SUCCESS ? 8 : 0; i < count; ++i) cuMemUnmap(va + i * chunk, chunk);
  for (auto h : handles) cuMemRelease(h);
  cuMemAddressFree(va, chunk * count);
}

// Whether cuMemMap, cuMemSetAccess and cuMemUnmap of a chunk no kernel uses wait for a kernel
// that is running (Note [unmap is immediate] in sim/src/api_vmm.cc): each is timed while a
// 50 ms kernel runs on another stream.
void ProbeVmmDuringKernel(CUdevice dev) {
  const size_t chunk = 2 << 20;
  const unsigned long long spin_ns = 50'000'000;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h;
  CUstream s;
  if (!Must("busy_reserve", cuMemAddressReserve(&va, chunk, 0, 0, 0)) ||
      !Must("busy_create", cuMemCreate(&h, chunk, &prop, 0)) ||
      !Must("busy_stream", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))) {
    return;
  }
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  using Clock = std::chrono::steady_clock;
  const char* names[] = {"map", "set_access", "unmap"};
  for (int op = 0; op < 3; ++op) {
    if (op >= 1) cuMemMap(va, chunk, 0, h, 0);
    if (op == 2) cuMemSetAccess(va, chunk, &access, 1);
    cuCtxSynchronize();
    ProbeSpin<<<1, 1, 0, reinterpret_cast<cudaStream_t>(s)>>>(spin_ns);
    auto t0 = Clock::now();
    CUresult r = op == 0   ? cuMemMap(va, chunk, 0, h, 0)
                 : op == 1 ? cuMemSetAccess(va, chunk, &access, 1)
                           : cuMemUnmap(va, chunk);
    auto t1 = Clock::now();
    const CUresult running = cuStreamQuery(s);
    const double us = Micros(t0, t1);
    Must(std::string("busy_") + names[op], r);
    Field(std::string(names[op]) + "_during_kernel_us", std::to_string(us));
    // Returned while the kernel still ran (not ready), or took most of its 50 ms.
    FieldStr(std::string(names[op]) + "_during_kernel",
             running == CUDA_ERROR_NOT_READY ? "returned while the kernel ran"
             : us > spin_ns / 2000.0         ? "waited for the kernel"
                                             : "kernel ended first");
    if (op == 0) cuMemUnmap(va, chunk);
    if (op == 1) {
      cuCtxSynchronize();
      cuMemUnmap(va, chunk);
    }
    cuCtxSynchronize();
  }
  cuStreamDestroy(s);
  cuMemRelease(h);
  cuMemAddressFree(va, chunk);
}

// What cuMemUnmap does to a kernel that is using the range: waits for it, lets it finish on
// memory kept alive, or takes the memory away (the kernel faults). Runs last: a fault makes
// the context unusable.
void ProbeUnmapInUse(CUdevice dev) {
  const size_t chunk = 2 << 20;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h;
  CUstream s;
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!Must("inuse_reserve", cuMemAddressReserve(&va, chunk, 0, 0, 0)) ||
      !Must("inuse_create", cuMemCreate(&h, chunk, &prop, 0)) ||
      !Must("inuse_map", cuMemMap(va, chunk, 0, h, 0)) ||
      !Must("inuse_access", cuMemSetAccess(va, chunk, &access, 1)) ||
      !Must("inuse_stream", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))) {
    return;
  }
  cuCtxSynchronize();
  ProbeSpinTouch<<<1, 1, 0, reinterpret_cast<cudaStream_t>(s)>>>(
      reinterpret_cast<unsigned*>(va), 50'000'000ull);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the kernel is running
  auto t0 = std::chrono::steady_clock::now();
  CUresult unmap = cuMemUnmap(va, chunk);
  auto t1 = std::chrono::steady_clock::now();
  CUresult kernel = cuStreamSynchronize(s);
  FieldStr("unmap_in_use", Name(unmap));
  Field("unmap_in_use_us", std::to_string(Micros(t0, t1)));
  FieldStr("unmap_in_use_kernel", Name(kernel));
  FieldStr("unmap_in_use_waited", Micros(t0, t1) > 20'000 ? "true" : "false");
}

// GB/s of `copies` 64 MiB copies enqueued by `enqueue(i)`, timed from the host.
template <typename F>
double Bandwidth(F enqueue, int copies, size_t bytes) {
  cuCtxSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < copies; ++i) enqueue(i);
  cuCtxSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  return copies * bytes / (Micros(t0, t1) * 1e3);
}

// Copy bandwidth between device memory and host memory two ways: a host-NUMA VMM mapping
// copied device-to-device (the shim's host tier), and pinned host memory (cuMemHostAlloc).
void ProbeCopyBandwidth(CUdevice dev) {
  const size_t bytes = 64 << 20;
  const int copies = 16;
  CUdeviceptr device = 0, mirror = 0;
  if (!Must("bw_device", cuMemAlloc(&device, bytes))) return;
  CUmemAllocationProp prop = Prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  CUmemGenericAllocationHandle h;
  if (!Must("bw_create", cuMemCreate(&h, bytes, &prop, 0))) return;
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (!Must("bw_reserve", cuMemAddressReserve(&mirror, bytes, 0, 0, 0)) ||
      !Must("bw_map", cuMemMap(mirror, bytes, 0, h, 0)) ||
      !Must("bw_access", cuMemSetAccess(mirror, bytes, &access, 1))) {
    return;
  }
  void* pinned = nullptr;
  if (!Must("bw_pinned", cuMemHostAlloc(&pinned, bytes, 0))) return;
  CUstream up, down;
  cuStreamCreate(&up, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&down, CU_STREAM_NON_BLOCKING);
  const size_t half = bytes / 2;
  Field("copy_hostnuma_to_device_gbps", std::to_string(Bandwidth(
      [&](int) { cuMemcpyDtoDAsync(device, mirror, bytes, up); }, copies, bytes)));
  Field("copy_device_to_hostnuma_gbps", std::to_string(Bandwidth(
      [&](int) { cuMemcpyDtoDAsync(mirror, device, bytes, down); }, copies, bytes)));
  Field("copy_hostnuma_both_ways_gbps", std::to_string(Bandwidth(
      [&](int) {
        cuMemcpyDtoDAsync(device, mirror, half, up);
        cuMemcpyDtoDAsync(mirror + half, device + half, half, down);
      }, copies, bytes)));
  Field("copy_pinned_htod_gbps", std::to_string(Bandwidth(
      [&](int) { cuMemcpyHtoDAsync(device, pinned, bytes, up); }, copies, bytes)));
  Field("copy_pinned_dtoh_gbps", std::to_string(Bandwidth(
      [&](int) { cuMemcpyDtoHAsync(pinned, device, bytes, down); }, copies, bytes)));
  Field("copy_pinned_both_ways_gbps", std::to_string(Bandwidth(
      [&](int) {
        cuMemcpyHtoDAsync(device, pinned, half, up);
        cuMemcpyDtoHAsync(static_cast<char*>(pinned) + half, device + half, half, down);
      }, copies, bytes)));
  // 2 MiB copies, the shim's chunk: what one page-in costs in copy time.
  Field("copy_hostnuma_to_device_2mib_gbps", std::to_string(Bandwidth(
      [&](int i) { cuMemcpyDtoDAsync(device + (i % 32) * (2 << 20), mirror + (i % 32) * (2 << 20),
                                     2 << 20, up); }, 256, 2 << 20)));
  cuStreamDestroy(up);
  cuStreamDestroy(down);
  cuMemFreeHost(pinned);
  cuMemUnmap(mirror, bytes);
  cuMemAddressFree(mirror, bytes);
  cuMemRelease(h);
  cuMemFree(device);
}

}  // namespace

int main() {
  // The runtime creates and makes current the primary context, as in applications.
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("{\"error\": \"no CUDA device\"}\n");
    return 1;
  }
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  cuCtxGetCurrent(&ctx);
  cuCtxGetDevice(&dev);
  int driver = 0;
  cuDriverGetVersion(&driver);
  Field("driver_version", driver);
  ProbeAttributes(dev);
  ProbeGranularity(dev);
  ProbeHostNumaMapping(dev);
  ProbeEntryPoints();
  ProbeParamInfo();
  ProbeMapLatency(dev);
  ProbeCaptureQuery(ctx);
  ProbeRelaxedQueryOnly(ctx);
  ProbeEdgeAnswers();
  ProbeRangeCosts(dev);
  ProbeVmmDuringKernel(dev);
  ProbeCopyBandwidth(dev);
  ProbeUnmapInUse(dev);  // last: may leave the context faulted
  Field("errors", g_errors);
  std::printf("%s\n}\n", g_json.c_str());
  return g_errors == 0 ? 0 : 1;
}

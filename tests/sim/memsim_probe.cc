// Helper process for the multi-process tests: a tiny driver-API program.
//   memsim_probe uninit       exit 0 iff calls before cuInit fail with NOT_INITIALIZED
//   memsim_probe alloc BYTES  exit 0 if cuMemAlloc(BYTES) succeeds, 2 on OUT_OF_MEMORY
//   memsim_probe hold BYTES   allocate, print "ok" or "oom", then wait until stdin closes
//   memsim_probe uuid         print device 0's UUID in hex
//   memsim_probe hostnuma     print device 0's HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED and
//                             HOST_NUMA_ID attributes, then the results of cuMemCreate at a
//                             HOST_NUMA and at a HOST location
//   memsim_probe ipc HEX N    open the CUipcMemHandle given as 128 hex digits, print the FNV-1a
//                             checksum of its first N bytes, overwrite them with their bitwise
//                             complement, close the handle; or print the open's error code
//   memsim_probe ipcevent HEX open the CUipcEventHandle given as 128 hex digits and print, one
//                             line each as they happen: "query" (cuEventQuery), "synchronized"
//                             (cuEventSynchronize), "waited" (cuStreamWaitEvent, then
//                             cuStreamSynchronize) and "record" (cuEventRecord on it), each
//                             with its result; or print the open's error code
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int Fail(const char* what, CUresult r) {
  std::fprintf(stderr, "memsim_probe: %s failed: %d\n", what, static_cast<int>(r));
  return 1;
}

int Setup(CUcontext* ctx) {
  if (CUresult r = cuInit(0)) return Fail("cuInit", r);
  if (CUresult r = cuCtxCreate(ctx, nullptr, 0, 0)) return Fail("cuCtxCreate", r);
  return 0;
}

int HostNuma() {
  int supported = -5, numa_id = -5;
  cuDeviceGetAttribute(&supported,
                       CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
  cuDeviceGetAttribute(&numa_id, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  CUmemGenericAllocationHandle h;
  const CUresult numa = cuMemCreate(&h, 2u << 20, &prop, 0);
  if (numa == CUDA_SUCCESS) cuMemRelease(h);
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  const CUresult host = cuMemCreate(&h, 2u << 20, &prop, 0);
  if (host == CUDA_SUCCESS) cuMemRelease(h);
  std::printf("%d %d %d %d\n", supported, numa_id, static_cast<int>(numa), static_cast<int>(host));
  return 0;
}

// Parses 128 hex digits into a 64-byte handle; false if malformed.
bool ParseHandle(const char* hex, char (&reserved)[64]) {
  if (std::strlen(hex) != 2 * sizeof(reserved)) return false;
  for (size_t i = 0; i < sizeof(reserved); ++i) {
    unsigned v = 0;
    if (std::sscanf(hex + 2 * i, "%2x", &v) != 1) return false;
    reserved[i] = static_cast<char>(v);
  }
  return true;
}

int OpenIpcEvent(const char* hex) {
  CUipcEventHandle handle = {};
  if (!ParseHandle(hex, handle.reserved)) return 64;
  CUevent ev;
  const CUresult r = cuIpcOpenEventHandle(&ev, handle);
  if (r != CUDA_SUCCESS) {
    std::printf("error %d\n", static_cast<int>(r));
    return 0;
  }
  std::printf("query %d\n", static_cast<int>(cuEventQuery(ev)));
  std::fflush(stdout);
  std::printf("synchronized %d\n", static_cast<int>(cuEventSynchronize(ev)));
  CUstream s;
  if (CUresult c = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) return Fail("cuStreamCreate", c);
  const CUresult waited = cuStreamWaitEvent(s, ev, 0);
  std::printf("waited %d %d\n", static_cast<int>(waited), static_cast<int>(cuStreamSynchronize(s)));
  std::printf("record %d\n", static_cast<int>(cuEventRecord(ev, s)));
  cuStreamDestroy(s);
  if (CUresult c = cuEventDestroy(ev)) return Fail("cuEventDestroy", c);
  return 0;
}

int OpenIpc(const char* hex, size_t bytes) {
  CUipcMemHandle handle = {};
  if (!ParseHandle(hex, handle.reserved)) return 64;
  CUdeviceptr p = 0;
  const CUresult r = cuIpcOpenMemHandle(&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  if (r != CUDA_SUCCESS) {
    std::printf("error %d\n", static_cast<int>(r));
    return 0;
  }
  std::vector<unsigned char> data(bytes);
  if (CUresult c = cuMemcpyDtoH(data.data(), p, bytes)) return Fail("cuMemcpyDtoH", c);
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char b : data) {
    h ^= b;
    h *= 1099511628211ULL;
  }
  for (unsigned char& b : data) b = static_cast<unsigned char>(~b);
  if (CUresult c = cuMemcpyHtoD(p, data.data(), bytes)) return Fail("cuMemcpyHtoD", c);
  if (CUresult c = cuIpcCloseMemHandle(p)) return Fail("cuIpcCloseMemHandle", c);
  std::printf("checksum %llu\n", static_cast<unsigned long long>(h));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const char* mode = argv[1];
  if (std::strcmp(mode, "uninit") == 0) {
    int n = 0;
    CUdevice d;
    CUcontext c;
    const bool ok = cuDeviceGetCount(&n) == CUDA_ERROR_NOT_INITIALIZED &&
                    cuDeviceGet(&d, 0) == CUDA_ERROR_NOT_INITIALIZED &&
                    cuCtxGetCurrent(&c) == CUDA_ERROR_NOT_INITIALIZED;
    return ok ? 0 : 1;
  }
  CUcontext ctx;
  if (int rc = Setup(&ctx)) return rc;
  if (std::strcmp(mode, "uuid") == 0) {
    CUuuid u;
    if (CUresult r = cuDeviceGetUuid(&u, 0)) return Fail("cuDeviceGetUuid", r);
    for (char b : u.bytes) std::printf("%02x", static_cast<unsigned char>(b));
    std::printf("\n");
    return 0;
  }
  if (std::strcmp(mode, "hostnuma") == 0) return HostNuma();
  if (std::strcmp(mode, "ipcevent") == 0 && argc == 3) return OpenIpcEvent(argv[2]);
  if (std::strcmp(mode, "ipc") == 0 && argc == 4)
    return OpenIpc(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc < 3) return 64;
  const size_t bytes = std::strtoull(argv[2], nullptr, 10);
  CUdeviceptr p;
  const CUresult r = cuMemAlloc(&p, bytes);
  if (std::strcmp(mode, "alloc") == 0) {
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return 2;
    return r == CUDA_SUCCESS ? 0 : Fail("cuMemAlloc", r);
  }
  if (std::strcmp(mode, "hold") == 0) {
    std::printf("%s\n", r == CUDA_SUCCESS ? "ok" : "oom");
    std::fflush(stdout);
    char c;
    while (read(STDIN_FILENO, &c, 1) > 0) {
    }
    return 0;
  }
  return 64;
}

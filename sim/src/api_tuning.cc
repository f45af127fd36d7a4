// Exported entry points that tune a GPU's caches, shared memory banks, profiler and RDMA
// ordering. None of them changes what the sim computes: each validates its arguments as
// documented, remembers nothing it is not asked back, and succeeds. Graph memory attributes
// answer 0: the sim has no graph memory nodes (cuGraphAddMemAllocNode is unsupported).

#include "api_common.h"

using memsim::Context;
using memsim::Device;
using memsim::Driver;
using memsim::Function;
using namespace memsim::api;

extern "C" {

CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig* pConfig) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (pConfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pConfig = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  return config <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_SUCCESS
                                                             : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) {
  Function* fn;
  if (CUresult r =
          ResolveFunctionOfKind(hfunc, Driver::FunctionHandleKind::kFunction, &fn, nullptr)) {
    return r;
  }
  return config <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_SUCCESS
                                                             : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  Function* fn;
  if (CUresult r =
          ResolveFunctionOfKind(kernel, Driver::FunctionHandleKind::kKernel, &fn, nullptr)) {
    return r;
  }
  Device* device;
  if (CUresult r = ResolveDevice(dev, &device)) return r;
  return config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuCtxResetPersistingL2Cache(void) {
  std::shared_ptr<Context> ctx;
  return CurrentContext(&ctx);
}

CUresult CUDAAPI cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                            CUflushGPUDirectRDMAWritesScope scope) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
      (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
       scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void* value) {
  Device* d;
  if (CUresult r = ResolveDevice(device, &d)) return r;
  if (value == nullptr || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                              void* value) {
  Device* d;
  if (CUresult r = ResolveDevice(device, &d)) return r;
  // Only the high watermarks can be reset, and only to 0.
  if (value == nullptr || *static_cast<cuuint64_t*>(value) != 0 ||
      (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  Device* d;
  return ResolveDevice(device, &d);
}

CUresult CUDAAPI cuProfilerInitialize(const char*, const char*, CUoutput_mode) {
  return CUDA_ERROR_NOT_SUPPORTED;  // removed from the runtime in CUDA 12
}

CUresult CUDAAPI cuProfilerStart(void) {
  std::shared_ptr<Context> ctx;
  return CurrentContext(&ctx);
}

CUresult CUDAAPI cuProfilerStop(void) {
  std::shared_ptr<Context> ctx;
  return CurrentContext(&ctx);
}

}  // extern "C"

// Exported entry points: contexts and primary contexts.
#include "api_common.h"

using memsim::Context;
using memsim::Device;
using namespace memsim::api;

namespace {

CUresult CreateContext(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ctx = std::make_shared<Context>(d, flags, false);
  D().contexts.Add(ctx);
  memsim::PushCurrentContext(ctx.get());
  *pctx = ctx->handle();
  return CUDA_SUCCESS;
}

CUresult ContextOrCurrent(CUcontext handle, std::shared_ptr<Context>* out) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr) return CurrentContext(out);
  *out = D().contexts.Get(handle);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CreateContext(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CreateContext(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                unsigned int flags, CUdevice dev) {
  if (ctxCreateParams != nullptr && ctxCreateParams->numExecAffinityParams > 0) {
    return CUDA_ERROR_NOT_SUPPORTED;  // execution affinity is not modelled
  }
  return CreateContext(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) {
  if (CUresult r = RequireInit()) return r;
  auto c = D().contexts.Get(ctx);
  if (!c || c->primary()) return CUDA_ERROR_INVALID_CONTEXT;
  DestroyContext(c);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (CUresult r = RequireInit()) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* raw = memsim::CurrentContextRaw();
  *pctx = raw != nullptr && D().contexts.Get(raw) ? raw->handle() : nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (CUresult r = RequireInit()) return r;
  if (ctx == nullptr) {
    memsim::SetCurrentContext(nullptr);
    return CUDA_SUCCESS;
  }
  auto c = D().contexts.Get(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  memsim::SetCurrentContext(c.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  if (CUresult r = RequireInit()) return r;
  auto c = D().contexts.Get(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  memsim::PushCurrentContext(c.get());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (CUresult r = RequireInit()) return r;
  Context* top = memsim::PopCurrentContext();
  if (top == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = top->handle();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) { return cuCtxPopCurrent_v2(pctx); }

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = c->device()->ordinal();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  std::shared_ptr<Context> c;
  if (CUresult r = ContextOrCurrent(ctx, &c)) return r;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = c->device()->ordinal();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = c->flags();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  c->set_flags(flags);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  std::shared_ptr<Context> c;
  if (CUresult r = ContextOrCurrent(ctx, &c)) return r;
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctxId = c->id();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  c->Synchronize();
  return c->sticky_error();
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  std::shared_ptr<Context> c;
  if (CUresult r = ContextOrCurrent(ctx, &c)) return r;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  c->Synchronize();
  return c->sticky_error();
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  std::shared_ptr<Context> c;
  if (CUresult r = ContextOrCurrent(ctx, &c)) return r;
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 3020;  // the context API version of every context since CUDA 3.2
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (pvalue == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      *pvalue = 1024;
      break;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      *pvalue = 1 << 20;
      break;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      *pvalue = 8 << 20;
      break;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      *pvalue = 2048;
      break;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
      *pvalue = 128;
      break;
    case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
      *pvalue = 0;
      break;
    default:
      return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  size_t ignored;
  (void)value;
  return cuCtxGetLimit(&ignored, limit);  // accepted and ignored: kernels are host code
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* pconfig) {
  std::shared_ptr<Context> c;
  if (CUresult r = CurrentContext(&c)) return r;
  if (pconfig == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pconfig = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  (void)config;
  std::shared_ptr<Context> c;
  return CurrentContext(&c);
}

// --- primary contexts ---------------------------------------------------------------------

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ctx = d->RetainPrimary();
  D().contexts.Add(ctx);
  *pctx = ctx->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  CUresult status;
  auto gone = d->ReleasePrimary(&status);
  if (gone) {
    DeactivatePrimaryContext(gone);
  }
  return status;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
  return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  auto gone = d->ResetPrimary();
  if (gone) {
    DeactivatePrimaryContext(gone);
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  d->PrimaryState(flags, active);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  Device* d;
  if (CUresult r = ResolveDevice(dev, &d)) return r;
  d->SetPrimaryFlags(flags);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

}  // extern "C"

// Exported entry points: modules, libraries, functions/kernels and launches.
//
// Note [module images]: the load entry points accept
// - nvcc images: cuModuleLoadData(Ex), cuModuleLoadFatBinary and cuLibraryLoadData take nvcc's
//   fatbin wrapper (what cudart registers), a fatbin container or a bare cubin
//   (module_loader.h, fatbin.h, cubin.h); cuModuleLoad and cuLibraryLoadFromFile take a file
//   holding a fatbin container or a cubin. Kernels run host implementations found by their
//   mangled names (Note [host kernels] in host_kernels.h).
// - shared objects of sim kernels (memsim/kernel.h): cuModuleLoad and cuLibraryLoadFromFile
//   take the object's path; the data forms take a NUL-terminated path when the bytes are not an
//   nvcc image.
// Libraries load without a current context, as in the real driver (cudart loads its fatbins
// before any context exists); modules need one (CUDA_ERROR_INVALID_CONTEXT otherwise).
#include <cstring>
#include <string>

#include "api_common.h"
#include "launch.h"
#include "module_loader.h"

using memsim::Context;
using memsim::Driver;
using memsim::Function;
using memsim::Module;
using memsim::Stream;
using namespace memsim::api;

namespace {

constexpr auto kFunctionHandle = Driver::FunctionHandleKind::kFunction;
constexpr auto kKernelHandle = Driver::FunctionHandleKind::kKernel;

// `image` nullptr: load the file `path`.
CUresult LoadModule(const void* image, const char* path, std::shared_ptr<Module>* out) {
  if (CUresult r = RequireInit()) return r;
  if (image == nullptr && path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Module> module;
  CUresult r = image != nullptr ? memsim::LoadModuleFromImage(image, &module)
                                : memsim::LoadModuleFromFile(path, &module);
  if (r != CUDA_SUCCESS) return r;
  D().modules.Add(module);
  for (Function* fn : module->Functions()) D().RegisterFunction(fn, module);
  *out = std::move(module);
  return CUDA_SUCCESS;
}

CUresult ModuleLoad(CUmodule* module, const void* image, const char* path) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  std::shared_ptr<Module> m;
  if (CUresult r = LoadModule(image, path, &m)) return r;
  *module = m->handle();
  return CUDA_SUCCESS;
}

CUresult LibraryLoad(CUlibrary* library, const void* image, const char* path) {
  if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Module> m;
  if (CUresult r = LoadModule(image, path, &m)) return r;
  *library = reinterpret_cast<CUlibrary>(m.get());
  return CUDA_SUCCESS;
}

CUresult Unload(const void* handle) {
  if (CUresult r = RequireInit()) return r;
  auto m = D().modules.Remove(handle);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  D().UnregisterModuleFunctions(m.get());
  m->ReleaseGlobals();
  return CUDA_SUCCESS;  // queued launches keep the shared object open until they ran
}

CUresult GetFunction(const void* module_handle, const char* name, Function** out) {
  if (CUresult r = RequireInit()) return r;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto m = D().modules.Get(module_handle);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = m->GetFunction(name, out)) return r;
  D().RegisterFunction(*out, m);
  return CUDA_SUCCESS;
}

CUresult ParamInfo(const void* handle, Driver::FunctionHandleKind kind, size_t index,
                   size_t* offset, size_t* size) {
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(handle, kind, &fn, nullptr)) return r;
  const auto& layout = fn->layout();
  if (index >= layout.sizes.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = layout.offsets[index];
  if (size != nullptr) *size = layout.sizes[index];
  return CUDA_SUCCESS;
}

CUresult FunctionAttribute(int* pi, CUfunction_attribute attrib) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
      *pi = 90;
      break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *pi = 90;
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = 49152;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *pi = -1;
      break;
    default:
      *pi = 0;
      break;
  }
  return CUDA_SUCCESS;
}

// A launch on a capturing stream becomes a kernel node (arguments copied now); an error
// invalidates the capture (Note [capture] in graph.h).
CUresult CaptureLaunch(memsim::Capture& capture, const Stream* stream,
                       const std::shared_ptr<Module>& module, Function* fn,
                       const memsim::LaunchGeometry& g, void** params, void** extra) {
  memsim::NodeOp op;
  op.type = CU_GRAPH_NODE_TYPE_KERNEL;
  CUresult r = memsim::ValidateGeometry(g);
  if (r == CUDA_SUCCESS) r = memsim::CheckHostEntry(*fn);
  std::shared_ptr<memsim::PackedArgs> args;
  if (r == CUDA_SUCCESS) r = memsim::PackArgs(fn->layout(), params, extra, &args);
  if (r != CUDA_SUCCESS) {
    capture.Invalidate();
    return r;
  }
  op.kernel.fn = fn;
  op.kernel.module = module;
  op.kernel.geometry = g;
  op.kernel.args = std::move(args);
  op.kernel.via_extra = extra != nullptr;
  return capture.Add(stream, std::move(op));
}

CUresult Launch(CUfunction f, const memsim::LaunchGeometry& g, CUstream h, void** params,
                void** extra, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(h, per_thread, &ctx, &stream)) return r;
  Function* fn;
  std::shared_ptr<Module> module;
  auto capture = stream->capture();
  if (CUresult r = ResolveFunction(f, &fn, &module)) {
    if (capture != nullptr) capture->Invalidate();
    return r;
  }
  if (capture != nullptr)
    return CaptureLaunch(*capture, stream.get(), module, fn, g, params, extra);
  return memsim::EnqueueLaunch(ctx, stream, module, fn, g, params, extra);
}

CUresult GetGlobal(const void* handle, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  auto m = D().modules.Get(handle);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr || (dptr == nullptr && bytes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  void* address = nullptr;
  size_t size = 0;
  if (CUresult r = m->GetGlobal(ctx, name, &address, &size)) return r;
  if (dptr != nullptr) *dptr = reinterpret_cast<CUdeviceptr>(address);
  if (bytes != nullptr) *bytes = size;
  return CUDA_SUCCESS;
}

memsim::LaunchGeometry Geometry(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned shmem) {
  return memsim::LaunchGeometry{{gx, gy, gz}, {bx, by, bz}, shmem};
}

CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                  bool per_thread) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Launch(f,
                Geometry(config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                         config->blockDimY, config->blockDimZ, config->sharedMemBytes),
                config->hStream, params, extra, per_thread);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ModuleLoad(module, nullptr, fname);
}
CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ModuleLoad(module, image, nullptr);
}
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  (void)numOptions;
  (void)options;
  (void)optionValues;
  return cuModuleLoadData(module, image);
}
CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}
CUresult CUDAAPI cuModuleUnload(CUmodule hmod) { return Unload(hmod); }

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_EAGER_LOADING;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  if (hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = GetFunction(hmod, name, &fn)) return r;
  *hfunc = fn->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod,
                                      const char* name) {
  return GetGlobal(hmod, name, dptr, bytes);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  if (fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LibraryLoad(library, nullptr, fileName);
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  if (code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LibraryLoad(library, code, nullptr);
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) { return Unload(library); }

CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (CUresult r = RequireInit()) return r;
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto m = D().modules.Get(library);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = m->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (pKernel == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = GetFunction(library, name, &fn)) return r;
  *pKernel = fn->kernel_handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (CUresult r = RequireInit()) return r;
  auto m = D().modules.Get(lib);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<unsigned int>(m->Functions().size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels,
                                           CUlibrary lib) {
  if (CUresult r = RequireInit()) return r;
  auto m = D().modules.Get(lib);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (kernels == nullptr && numKernels > 0) return CUDA_ERROR_INVALID_VALUE;
  const std::vector<Function*> functions = m->Functions();
  for (size_t i = 0; i < functions.size() && i < numKernels; ++i) {
    kernels[i] = functions[i]->kernel_handle();
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                    const char* name) {
  return GetGlobal(library, name, dptr, bytes);
}

// The sim has no managed memory (cuMemAllocManaged is not supported), so no library has a
// `__managed__` variable to return: CUDA_ERROR_NOT_FOUND, as documented for a missing name.
CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                     const char* name) {
  if (CUresult r = RequireInit()) return r;
  if (!D().modules.Get(library)) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr || (dptr == nullptr && bytes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(kernel, kKernelHandle, &fn, nullptr)) return r;
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  *pFunc = fn->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(kernel, kKernelHandle, &fn, nullptr)) return r;
  *pLib = reinterpret_cast<CUlibrary>(fn->module());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                      size_t* paramSize) {
  return ParamInfo(kernel, kKernelHandle, paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(hfunc, kKernelHandle, &fn, nullptr)) return r;
  *name = fn->name().c_str();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel,
                                      CUdevice dev) {
  (void)dev;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(kernel, kKernelHandle, &fn, nullptr)) return r;
  return FunctionAttribute(pi, attrib);
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                      CUdevice dev) {
  (void)attrib, (void)val, (void)dev;
  Function* fn;
  return ResolveFunctionOfKind(kernel, kKernelHandle, &fn, nullptr);
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                    size_t* paramSize) {
  return ParamInfo(func, kFunctionHandle, paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(hfunc, kFunctionHandle, &fn, nullptr)) return r;
  return FunctionAttribute(pi, attrib);
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  (void)attrib, (void)value;
  Function* fn;
  return ResolveFunctionOfKind(hfunc, kFunctionHandle, &fn, nullptr);
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  (void)config;
  Function* fn;
  return ResolveFunctionOfKind(hfunc, kFunctionHandle, &fn, nullptr);
}

CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(hfunc, kFunctionHandle, &fn, nullptr)) return r;
  *hmod = fn->module()->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(hfunc, kFunctionHandle, &fn, nullptr)) return r;
  *name = fn->name().c_str();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* fn;
  if (CUresult r = ResolveFunctionOfKind(function, kFunctionHandle, &fn, nullptr)) return r;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  Function* fn;
  return ResolveFunctionOfKind(function, kFunctionHandle, &fn, nullptr);
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra) {
  return Launch(f, Geometry(gx, gy, gz, bx, by, bz, sharedMemBytes), hStream, kernelParams, extra,
                false);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  return Launch(f, Geometry(gx, gy, gz, bx, by, bz, sharedMemBytes), hStream, kernelParams, extra,
                true);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  return LaunchEx(config, f, kernelParams, extra, false);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                       void** kernelParams, void** extra) {
  return LaunchEx(config, f, kernelParams, extra, true);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams) {
  return Launch(f, Geometry(gx, gy, gz, bx, by, bz, sharedMemBytes), hStream, kernelParams, nullptr,
                false);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int sharedMemBytes,
                                                CUstream hStream, void** kernelParams) {
  return Launch(f, Geometry(gx, gy, gz, bx, by, bz, sharedMemBytes), hStream, kernelParams, nullptr,
                true);
}

}  // extern "C"

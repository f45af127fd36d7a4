// Exported entry points: legacy CUDA IPC for cuMemAlloc memory (Note [ipc backing] in ipc.h).
// IPC event handles are not simulated.
#include "api_common.h"
#include "ipc.h"

using memsim::Context;
using namespace memsim::api;

namespace {

CUresult Open(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned int flags) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  // Documented: Flags must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS.
  if (pdptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t out = 0;
  if (CUresult r = memsim::OpenMemHandle(ctx.get(), handle, &out)) return r;
  *pdptr = out;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return memsim::ExportMemHandle(dptr, pHandle);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                       unsigned int Flags) {
  return Open(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return Open(pdptr, handle, Flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  return memsim::CloseMemHandle(dptr);
}

}  // extern "C"

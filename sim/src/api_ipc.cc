// Exported entry points: legacy CUDA IPC for cuMemAlloc memory (Note [ipc backing] in ipc.h).
// Event handles: Note [ipc events] in ipc_event.h.
#include "api_common.h"
#include "event.h"
#include "ipc.h"
#include "ipc_event.h"

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

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent event) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ev = D().events.Get(event);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  // Documented: the event must have been created with CU_EVENT_INTERPROCESS (and
  // CU_EVENT_DISABLE_TIMING); an opened event is not exported again.
  if (!ev->shared() || ev->imported()) return CUDA_ERROR_INVALID_VALUE;
  memsim::ExportEventHandle(*ev->shared(), pHandle);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<memsim::SharedEventState> shared;
  if (CUresult r = memsim::OpenEventHandle(handle, &shared)) return r;
  // Documented: "behaves like a locally created event with the CU_EVENT_DISABLE_TIMING flag".
  auto ev = std::make_shared<memsim::Event>(
      ctx.get(), CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, std::move(shared), true);
  D().events.Add(ev);
  *phEvent = reinterpret_cast<CUevent>(ev.get());
  return CUDA_SUCCESS;
}

}  // extern "C"

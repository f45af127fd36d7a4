#include "api_common.h"

#include <sys/mman.h>

#include "export_tables.h"
#include "ipc.h"
#include "memory_ops.h"

namespace memsim::api {

CUresult CurrentContext(std::shared_ptr<Context>* out) {
  if (CUresult r = RequireInit()) return r;
  Context* raw = CurrentContextRaw();
  if (raw == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *out = D().contexts.Get(raw);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult ResolveStream(CUstream handle, bool per_thread, std::shared_ptr<Context>* ctx,
                       std::shared_ptr<Stream>* stream) {
  if (CUresult r = RequireInit()) return r;
  if (handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD) {
    if (CUresult r = CurrentContext(ctx)) return r;
    const bool use_per_thread = handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread);
    *stream = use_per_thread ? (*ctx)->PerThreadStream() : (*ctx)->LegacyStream();
    return CUDA_SUCCESS;
  }
  *stream = D().streams.Get(handle);
  if (!*stream) return CUDA_ERROR_INVALID_HANDLE;
  *ctx = D().contexts.Get((*stream)->context());
  if (!*ctx) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}

CUresult ResolveStreamForWork(CUstream handle, bool per_thread, std::shared_ptr<Context>* ctx,
                              std::shared_ptr<Stream>* stream) {
  if (CUresult r = ResolveStream(handle, per_thread, ctx, stream)) return r;
  if (CUresult r = (*ctx)->sticky_error()) return r;
  return CheckLegacyUse(**ctx, **stream, /*invalidate=*/true);
}

CUresult CheckLegacyUse(Context& ctx, const Stream& stream, bool invalidate) {
  if (stream.kind() != Stream::Kind::kLegacyDefault || ctx.blocking_captures() == 0) {
    return CUDA_SUCCESS;
  }
  if (invalidate) {
    for (auto& s : ctx.Streams()) {
      auto capture = s->capture();
      if (capture != nullptr && s->blocking()) capture->Invalidate();
    }
  }
  return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

CUresult RefuseDuringCapture(Stream& stream, CUresult error) {
  auto capture = stream.capture();
  if (capture == nullptr) return CUDA_SUCCESS;
  capture->Invalidate();
  return error;
}

CUstreamCaptureStatus CaptureStatus(Stream& stream) {
  auto capture = stream.capture();
  if (capture == nullptr) return CU_STREAM_CAPTURE_STATUS_NONE;
  return capture->invalidated() ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

void LeaveJoinedStreams(Context& ctx, Capture& capture) {
  for (const auto& joined : capture.JoinedStreams()) {
    if (joined->capture().get() != &capture) continue;
    joined->LeaveCapture();
    if (joined->blocking()) ctx.AddBlockingCaptures(-1);
  }
}

void AbandonCapture(Context& ctx, Stream& stream) {
  auto capture = stream.capture();
  if (capture == nullptr) return;
  if (capture->origin() != &stream) {  // a joined stream leaves; the capture cannot succeed
    capture->Invalidate();
    stream.LeaveCapture();
    if (stream.blocking()) ctx.AddBlockingCaptures(-1);
    return;
  }
  LeaveJoinedStreams(ctx, *capture);
  stream.EndCapture();
  if (capture->blocking()) ctx.AddBlockingCaptures(-1);
  capture->graph()->set_capturing(false);
  if (D().graphs.Remove(capture->graph().get())) capture->graph()->ReleaseNodes();
}

CUresult ResolveFunction(const void* handle, Function** fn, std::shared_ptr<Module>* module) {
  if (CUresult r = RequireInit()) return r;
  Driver::FunctionHandleKind kind;
  auto m = D().LookupFunction(handle, fn, &kind);
  if (!m) return CUDA_ERROR_INVALID_HANDLE;
  if (module != nullptr) *module = std::move(m);
  return CUDA_SUCCESS;
}

CUresult ResolveFunctionOfKind(const void* handle, Driver::FunctionHandleKind kind, Function** fn,
                               std::shared_ptr<Module>* module) {
  if (CUresult r = RequireInit()) return r;
  Driver::FunctionHandleKind actual;
  Function* found = nullptr;
  auto m = D().LookupFunction(handle, &found, &actual);
  if (!m || actual != kind) return CUDA_ERROR_INVALID_HANDLE;
  *fn = found;
  if (module != nullptr) *module = std::move(m);
  return CUDA_SUCCESS;
}

CUresult ResolveDevice(CUdevice ordinal, Device** out) {
  if (CUresult r = RequireInit()) return r;
  *out = D().device(ordinal);
  return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

namespace {

// Frees what a context owns: its streams' and events' handles and its cuMemAlloc/host
// allocations. REQUIRES: the context's streams were shut down.
void ReleaseContextResources(Context* ctx) {
  for (auto& s : D().streams.Snapshot()) {
    if (s->context() == ctx) D().streams.Remove(s.get());
  }
  for (auto& e : D().events.Snapshot()) {
    if (e->context() == ctx) D().events.Remove(e.get());
  }
  memsim::ForgetIpcOpenedBy(ctx);  // its opened handles are unmapped just below
  for (uint64_t ptr : ctx->device()->va().ClassicOwnedBy(ctx)) FreeDeviceMemory(ptr);
  for (const HostRange& r : D().host_memory.OwnedBy(ctx)) {
    if (D().host_memory.Remove(r.base, r.registered) && !r.registered) {
      munmap(reinterpret_cast<void*>(r.base), r.size);
    }
  }
  RemoveFromCurrentStack(ctx);
}

}  // namespace

void DestroyContext(const std::shared_ptr<Context>& ctx) {
  DestroyContextLocalStorage(ctx.get());  // while the handle still resolves
  D().contexts.Remove(ctx.get());
  ctx->Shutdown();
  ReleaseContextResources(ctx.get());
}

void DeactivatePrimaryContext(const std::shared_ptr<Context>& ctx) {
  DestroyContextLocalStorage(ctx.get());
  ctx->Shutdown();
  ReleaseContextResources(ctx.get());
  ctx->Reset();
}

}  // namespace memsim::api

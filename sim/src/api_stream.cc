// Exported entry points: streams, events and host functions.
#include "api_common.h"

using memsim::Capture;
using memsim::Context;
using memsim::Event;
using memsim::Stream;
using memsim::StreamOp;
using namespace memsim::api;

namespace {

CUresult CreateStream(CUstream* phStream, unsigned int flags, int priority) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  if (phStream == nullptr || (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (priority > 0) priority = 0;  // clamped to [greatest, least] = [-5, 0] as documented
  if (priority < -5) priority = -5;
  auto stream = ctx->CreateStream(flags, priority);
  D().streams.Add(stream);
  *phStream = reinterpret_cast<CUstream>(stream.get());
  return CUDA_SUCCESS;
}

CUresult Synchronize(CUstream h, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, per_thread, &ctx, &stream)) return r;
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)) return r;
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
  stream->WaitFor(stream->last_enqueued());
  return ctx->sticky_error();
}

CUresult Query(CUstream h, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, per_thread, &ctx, &stream)) return r;
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)) return r;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
  if (CUresult r = ctx->sticky_error()) return r;
  return stream->Idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// A wait on a captured event (Note [cross-stream capture] in graph.h): `stream` joins `capture`
// or, already in it, takes `nodes` as further dependencies.
CUresult WaitCaptured(Context& ctx, const std::shared_ptr<Stream>& stream, const Event& ev,
                      const std::shared_ptr<Capture>& capture,
                      const std::vector<CUgraphNode>& nodes, unsigned flags) {
  auto current = stream->capture();
  if (current != nullptr && current != capture) {  // would merge two capture sequences
    current->Invalidate();
    capture->Invalidate();
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  // External event nodes (CU_EVENT_WAIT_EXTERNAL) are not simulated; the legacy stream cannot
  // be captured; a capture spans one context.
  if (flags != CU_EVENT_WAIT_DEFAULT || stream->kind() == Stream::Kind::kLegacyDefault ||
      ev.context() != &ctx) {
    capture->Invalidate();
    return flags != CU_EVENT_WAIT_DEFAULT ? CUDA_ERROR_NOT_SUPPORTED
                                          : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  capture->Join(stream, nodes);
  if (current == nullptr) {
    if (!stream->JoinCapture(capture)) return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;  // raced
    if (stream->blocking()) ctx.AddBlockingCaptures(1);
  }
  return CUDA_SUCCESS;
}

CUresult WaitEvent(CUstream h, CUevent hEvent, unsigned int flags, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, per_thread, &ctx, &stream)) return r;
  auto ev = D().events.Get(hEvent);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  if (flags != CU_EVENT_WAIT_DEFAULT && flags != CU_EVENT_WAIT_EXTERNAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (ev->imported()) {  // Note [ipc events]: the generation recorded now, by the exporter
    const std::shared_ptr<memsim::SharedEventState> shared = ev->shared();
    const uint64_t generation = shared->recorded();
    if (shared->Reached(generation)) return ctx->sticky_error();
    StreamOp op;
    op.device_work = false;
    op.run = [shared, generation] { shared->WaitFor(generation); };
    ctx->Enqueue(stream, std::move(op));
    return ctx->sticky_error();
  }
  std::vector<CUgraphNode> nodes;
  if (auto capture = ev->Captured(&nodes)) {
    if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
    return WaitCaptured(*ctx, stream, *ev, capture, nodes, flags);
  }
  // A capturing stream waiting on work outside its capture (an external dependency) is not
  // simulated.
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_NOT_SUPPORTED)) return r;
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
  auto [target, seq] = ev->LastRecord();
  if (target == nullptr || target == stream) return ctx->sticky_error();  // nothing to wait for
  StreamOp op;
  op.device_work = false;
  op.deps.emplace_back(target, seq);
  op.run = [] {};
  ctx->Enqueue(stream, std::move(op));
  return ctx->sticky_error();
}

CUresult AddHostWork(CUstream h, bool per_thread, std::function<void(CUresult)> fn) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(h, per_thread, &ctx, &stream)) return r;
  // Documented: cuStreamAddCallback is not supported during stream capture.
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)) return r;
  Context* raw = ctx.get();
  StreamOp op;
  op.device_work = false;
  op.run = [raw, fn = std::move(fn)] { fn(raw->sticky_error()); };
  ctx->Enqueue(stream, std::move(op));
  return CUDA_SUCCESS;
}

CUresult AddCallback(CUstream h, CUstreamCallback cb, void* user, unsigned flags, bool ptds) {
  if (cb == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return AddHostWork(h, ptds, [h, cb, user](CUresult status) { cb(h, status, user); });
}

CUresult HostFunc(CUstream h, CUhostFn fn, void* user, bool ptds) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(h, ptds, &ctx, &stream)) return r;
  if (auto capture = stream->capture()) {  // a host node (Note [capture] in graph.h)
    memsim::NodeOp op;
    op.type = CU_GRAPH_NODE_TYPE_HOST;
    op.host.fn = fn;
    op.host.user = user;
    return capture->Add(stream.get(), std::move(op));
  }
  return AddHostWork(h, ptds, [fn, user](CUresult status) {
    if (status == CUDA_SUCCESS) fn(user);  // not called once the context is broken
  });
}

// Shared body of the stream queries: resolves the stream (a bad stream is reported before a
// null output), then stores read(ctx, stream) in *out.
template <typename T, typename Read>
CUresult QueryStream(CUstream h, bool ptds, T* out, Read read) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = read(*ctx, *stream);
  return CUDA_SUCCESS;
}

CUresult GetFlags(CUstream h, unsigned int* flags, bool ptds) {
  return QueryStream(h, ptds, flags, [](Context&, Stream& s) { return s.flags(); });
}

CUresult GetPriority(CUstream h, int* priority, bool ptds) {
  return QueryStream(h, ptds, priority, [](Context&, Stream& s) { return s.priority(); });
}

CUresult GetCtx(CUstream h, CUcontext* pctx, bool ptds) {
  return QueryStream(h, ptds, pctx, [](Context& c, Stream&) { return c.handle(); });
}

CUresult GetId(CUstream h, unsigned long long* id, bool ptds) {
  return QueryStream(h, ptds, id, [](Context&, Stream& s) { return s.id(); });
}

CUresult GetDevice(CUstream h, CUdevice* dev, bool ptds) {
  return QueryStream(h, ptds, dev, [](Context& c, Stream&) { return c.device()->ordinal(); });
}

CUresult IsCapturing(CUstream h, CUstreamCaptureStatus* status, bool ptds) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/false)) return r;
  *status = memsim::api::CaptureStatus(*stream);
  return CUDA_SUCCESS;
}

CUresult Record(CUevent hEvent, CUstream h, bool ptds) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  auto ev = D().events.Get(hEvent);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  // Documented for cuEventRecord: the event and the stream must be of one context.
  if (ev->context() != ctx.get()) return CUDA_ERROR_INVALID_HANDLE;
  if (ev->imported()) return CUDA_ERROR_NOT_SUPPORTED;  // Note [ipc events]
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/true)) return r;
  if (auto capture = stream->capture()) {  // Note [cross-stream capture] in graph.h
    ev->RecordCaptured(capture, capture->Snapshot(stream.get()));
    return CUDA_SUCCESS;
  }
  ev->Record(ctx.get(), stream);
  return ctx->sticky_error();
}

// A captured event stands for graph nodes, not for work scheduled for execution: the CUDA
// programming guide makes querying or synchronizing it invalid.
CUresult RefuseCapturedEvent(Event& ev) {
  std::vector<CUgraphNode> nodes;
  return ev.Captured(&nodes) != nullptr ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult EventContextError(const std::shared_ptr<Event>& ev) {
  auto ctx = D().contexts.Get(ev->context());
  return ctx ? ctx->sticky_error() : CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return CreateStream(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  return CreateStream(phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  if (CUresult r = RequireInit()) return r;
  auto stream = D().streams.Remove(hStream);
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  auto ctx = D().contexts.Get(stream->context());
  if (ctx != nullptr) AbandonCapture(*ctx, *stream);  // its graph goes with it
  if (ctx != nullptr) ctx->DestroyStream(stream);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream hStream) { return cuStreamDestroy_v2(hStream); }

CUresult CUDAAPI cuStreamSynchronize(CUstream h) { return Synchronize(h, false); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return Synchronize(h, true); }
CUresult CUDAAPI cuStreamQuery(CUstream h) { return Query(h, false); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return Query(h, true); }
CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int f) {
  return WaitEvent(h, e, f, false);
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f) {
  return WaitEvent(h, e, f, true);
}
CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback cb, void* u, unsigned int f) {
  return AddCallback(h, cb, u, f, false);
}
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback cb, void* u,
                                          unsigned int f) {
  return AddCallback(h, cb, u, f, true);
}
CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void* u) {
  return HostFunc(h, fn, u, false);
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* u) {
  return HostFunc(h, fn, u, true);
}
CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int* f) { return GetFlags(h, f, false); }
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int* f) { return GetFlags(h, f, true); }
CUresult CUDAAPI cuStreamGetPriority(CUstream h, int* p) { return GetPriority(h, p, false); }
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int* p) { return GetPriority(h, p, true); }
CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext* c) { return GetCtx(h, c, false); }
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext* c) { return GetCtx(h, c, true); }
CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long* id) { return GetId(h, id, false); }
CUresult CUDAAPI cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  return GetId(h, id, true);
}
CUresult CUDAAPI cuStreamGetDevice(CUstream h, CUdevice* d) { return GetDevice(h, d, false); }
CUresult CUDAAPI cuStreamGetDevice_ptsz(CUstream h, CUdevice* d) { return GetDevice(h, d, true); }
CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* s) {
  return IsCapturing(h, s, false);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* s) {
  return IsCapturing(h, s, true);
}

// --- events ---------------------------------------------------------------------------------

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  std::shared_ptr<Context> ctx;
  if (CUresult r = CurrentContext(&ctx)) return r;
  const unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Documented: CU_EVENT_INTERPROCESS must be specified along with CU_EVENT_DISABLE_TIMING.
  std::shared_ptr<memsim::SharedEventState> shared;
  if (Flags & CU_EVENT_INTERPROCESS) {
    if ((Flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
    shared = memsim::SharedEventState::Create();  // Note [ipc events]
    if (!shared) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto ev = std::make_shared<Event>(ctx.get(), Flags, std::move(shared));
  D().events.Add(ev);
  *phEvent = reinterpret_cast<CUevent>(ev.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) { return Record(e, h, false); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream h) { return Record(e, h, true); }
CUresult CUDAAPI cuEventRecordWithFlags(CUevent e, CUstream h, unsigned int flags) {
  (void)flags;
  return Record(e, h, false);
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream h, unsigned int flags) {
  (void)flags;
  return Record(e, h, true);
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  if (CUresult r = RequireInit()) return r;
  auto ev = D().events.Get(hEvent);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  if (CUresult r = RefuseCapturedEvent(*ev)) return r;
  if (CUresult r = EventContextError(ev)) return r;
  return ev->Complete() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  if (CUresult r = RequireInit()) return r;
  auto ev = D().events.Get(hEvent);
  if (!ev) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = RefuseCapturedEvent(*ev)) return r;
  ev->Synchronize();
  return EventContextError(ev);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  if (CUresult r = RequireInit()) return r;
  return D().events.Remove(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuEventDestroy(CUevent hEvent) { return cuEventDestroy_v2(hEvent); }

CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  if (CUresult r = RequireInit()) return r;
  if (pMilliseconds == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto start = D().events.Get(hStart);
  auto end = D().events.Get(hEnd);
  if (!start || !end) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = RefuseCapturedEvent(*start)) return r;
  if (CUresult r = RefuseCapturedEvent(*end)) return r;
  return end->ElapsedSince(*start, pMilliseconds);
}
CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

}  // extern "C"

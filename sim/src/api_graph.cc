// Exported entry points: stream capture and CUDA graphs (the subset of graph.h).
//
// Graph, node and exec handles that are not live are CUDA_ERROR_INVALID_VALUE, the error the
// documentation lists for these functions.
#include <cstring>
#include <vector>

#include "api_common.h"
#include "graph.h"
#include "launch.h"

using memsim::Capture;
using memsim::Context;
using memsim::Function;
using memsim::Graph;
using memsim::GraphExec;
using memsim::GraphNode;
using memsim::Module;
using memsim::NodeOp;
using memsim::Stream;
using namespace memsim::api;

namespace {

static_assert(sizeof(CUstreamCaptureMode) == sizeof(int));

// Callers may pass any integer: the value is inspected as one, never loaded
// as the enum type (which would be undefined for out-of-range values).
bool ValidMode(const CUstreamCaptureMode* mode) {
  int raw;
  std::memcpy(&raw, mode, sizeof(raw));
  return raw == CU_STREAM_CAPTURE_MODE_GLOBAL || raw == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ||
         raw == CU_STREAM_CAPTURE_MODE_RELAXED;
}

// ---- capture ----------------------------------------------------------------------------------

CUresult BeginCapture(CUstream h, CUstreamCaptureMode mode, bool ptds) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  if (!ValidMode(&mode)) return CUDA_ERROR_INVALID_VALUE;
  // "Capture may not be initiated if stream is CU_STREAM_LEGACY."
  if (stream->kind() == Stream::Kind::kLegacyDefault) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  auto graph = std::make_shared<Graph>();
  graph->set_capturing(true);
  auto capture = std::make_shared<Capture>(graph, mode, stream.get(), stream->blocking());
  D().graphs.Add(graph);                                 // a live handle for cuStreamGetCaptureInfo
  if (capture->blocking()) ctx->AddBlockingCaptures(1);  // before any work can see the capture
  if (!stream->StartCapture(capture)) {
    if (capture->blocking()) ctx->AddBlockingCaptures(-1);
    D().graphs.Remove(graph.get());
    return CUDA_ERROR_ILLEGAL_STATE;  // already capturing
  }
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream h, CUgraph* phGraph, bool ptds) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  if (phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto capture = stream->capture();
  if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;  // not capturing
  // Note [cross-stream capture]: only the origin stream ends the capture.
  if (capture->origin() != stream.get()) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  if (capture->mode() != CU_STREAM_CAPTURE_MODE_RELAXED &&
      capture->thread() != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  const bool unjoined = !capture->AllJoined();
  if (capture->invalidated() || unjoined) {
    AbandonCapture(*ctx, *stream);
    *phGraph = nullptr;
    return unjoined ? CUDA_ERROR_STREAM_CAPTURE_UNJOINED : CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  LeaveJoinedStreams(*ctx, *capture);
  stream->EndCapture();
  if (capture->blocking()) ctx->AddBlockingCaptures(-1);
  capture->graph()->set_capturing(false);
  *phGraph = capture->graph()->handle();  // now the caller's
  return CUDA_SUCCESS;
}

CUresult CaptureInfo(CUstream h, bool ptds, CUstreamCaptureStatus* status, cuuint64_t* id,
                     CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                     size_t* count) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, ptds, &ctx, &stream)) return r;
  if (status == nullptr || (edges != nullptr && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckLegacyUse(*ctx, *stream, /*invalidate=*/false)) return r;
  auto capture = stream->capture();
  *status = CaptureStatus(*stream);
  if (capture == nullptr || *status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  if (id != nullptr) *id = capture->id();
  if (graph != nullptr) *graph = capture->graph()->handle();
  const std::vector<CUgraphNode>& current = capture->Dependencies(stream.get());
  if (deps != nullptr) *deps = current.empty() ? nullptr : current.data();
  if (edges != nullptr) {  // the sim's edges carry no data
    thread_local std::vector<CUgraphEdgeData> zeros;
    zeros.assign(current.size(), CUgraphEdgeData{});
    *edges = zeros.empty() ? nullptr : zeros.data();
  }
  if (count != nullptr) *count = current.size();
  return CUDA_SUCCESS;
}

// ---- graphs and nodes --------------------------------------------------------------------------

CUresult AddNode(CUgraphNode* out, CUgraph h, const CUgraphNode* deps, size_t count, NodeOp op) {
  if (CUresult r = RequireInit()) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto graph = D().graphs.Get(h);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  GraphNode* node = nullptr;
  if (CUresult r = graph->AddNode(std::move(op), deps, count, &node)) return r;
  *out = node->handle();
  return CUDA_SUCCESS;
}

// The parameters are copied now (kernel arguments included), as documented.
CUresult KernelOp(CUfunction func, CUkernel kern, const memsim::LaunchGeometry& g, void** params,
                  void** extra, NodeOp* op) {
  if (CUresult r = RequireInit()) return r;
  const void* handle = func != nullptr ? static_cast<const void*>(func) : kern;
  Function* fn = nullptr;
  std::shared_ptr<Module> module;
  if (handle == nullptr || ResolveFunction(handle, &fn, &module) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = memsim::ValidateGeometry(g)) return r;
  if (CUresult r = memsim::CheckHostEntry(*fn)) return r;
  std::shared_ptr<memsim::PackedArgs> args;
  if (CUresult r = memsim::PackArgs(fn->layout(), params, extra, &args)) return r;
  op->type = CU_GRAPH_NODE_TYPE_KERNEL;
  op->kernel.fn = fn;
  op->kernel.module = std::move(module);
  op->kernel.geometry = g;
  op->kernel.args = std::move(args);
  op->kernel.via_extra = extra != nullptr;
  return CUDA_SUCCESS;
}

template <typename Params>
memsim::LaunchGeometry GeometryOf(const Params& p) {
  return memsim::LaunchGeometry{{p.gridDimX, p.gridDimY, p.gridDimZ},
                                {p.blockDimX, p.blockDimY, p.blockDimZ},
                                p.sharedMemBytes};
}

// The node's kernel parameters; `Params` is CUDA_KERNEL_NODE_PARAMS_v1 or _v2.
template <typename Params>
CUresult KernelParams(CUgraphNode h, Params* out) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node || out == nullptr || node->op().type != CU_GRAPH_NODE_TYPE_KERNEL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const memsim::KernelNodeParams& k = node->op().kernel;
  std::memset(out, 0, sizeof(*out));
  out->func = const_cast<Function*>(k.fn)->handle();
  out->gridDimX = k.geometry.grid[0];
  out->gridDimY = k.geometry.grid[1];
  out->gridDimZ = k.geometry.grid[2];
  out->blockDimX = k.geometry.block[0];
  out->blockDimY = k.geometry.block[1];
  out->blockDimZ = k.geometry.block[2];
  out->sharedMemBytes = k.geometry.shared_mem_bytes;
  if (k.via_extra) {
    out->extra = node->extra();
  } else if (!k.args->pointers.empty()) {
    out->kernelParams = const_cast<void**>(k.args->pointers.data());
  }
  return CUDA_SUCCESS;  // the arrays live as long as the node
}

CUresult MemcpyOp(const CUDA_MEMCPY3D* p, CUcontext ctx, NodeOp* op) {
  if (CUresult r = RequireInit()) return r;
  if (p == nullptr || (ctx != nullptr && !D().contexts.Get(ctx))) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY ||
      p->Depth > 1) {
    return CUDA_ERROR_NOT_SUPPORTED;  // CUDA arrays and 3D copies are not simulated
  }
  if (p->WidthInBytes == 0 || p->Height == 0 || p->Depth == 0) return CUDA_ERROR_INVALID_VALUE;
  memsim::CopyShape shape;
  shape.width = p->WidthInBytes;
  shape.rows = p->Height;
  shape.src_pitch = p->srcPitch != 0 ? p->srcPitch : p->WidthInBytes;
  shape.dst_pitch = p->dstPitch != 0 ? p->dstPitch : p->WidthInBytes;
  if (shape.rows > 1 && (shape.src_pitch < shape.width || shape.dst_pitch < shape.width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t src_base = CopyEndpoint(p->srcMemoryType, p->srcHost, p->srcDevice);
  const uint64_t dst_base = CopyEndpoint(p->dstMemoryType, p->dstHost, p->dstDevice);
  const uint64_t src =
      src_base + (p->srcZ * p->srcHeight + p->srcY) * shape.src_pitch + p->srcXInBytes;
  const uint64_t dst =
      dst_base + (p->dstZ * p->dstHeight + p->dstY) * shape.dst_pitch + p->dstXInBytes;
  const size_t src_extent = (shape.rows - 1) * shape.src_pitch + shape.width;
  const size_t dst_extent = (shape.rows - 1) * shape.dst_pitch + shape.width;
  op->type = CU_GRAPH_NODE_TYPE_MEMCPY;
  if (CUresult r =
          memsim::ResolveByMemoryType(p->dstMemoryType, dst, dst_extent, true, &op->copy.dst)) {
    return r;
  }
  if (CUresult r =
          memsim::ResolveByMemoryType(p->srcMemoryType, src, src_extent, false, &op->copy.src)) {
    return r;
  }
  op->copy.shape = shape;
  op->copy.desc = *p;
  return CUDA_SUCCESS;
}

CUresult MemsetOp(const CUDA_MEMSET_NODE_PARAMS* p, CUcontext ctx, NodeOp* op) {
  if (CUresult r = RequireInit()) return r;
  if (ctx != nullptr && !D().contexts.Get(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t e = p->elementSize;
  if ((e != 1 && e != 2 && e != 4) || p->width == 0 || p->height == 0 || p->dst % e != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->height > 1 && (p->pitch % e != 0 || p->pitch < p->width * e)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memsim::CopyEnd d;
  const size_t extent = (p->height - 1) * p->pitch + p->width * e;
  if (memsim::ResolveDeviceSide(p->dst, extent, true, &d) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  op->type = CU_GRAPH_NODE_TYPE_MEMSET;
  op->memset = *p;
  return CUDA_SUCCESS;
}

// Fills `out` per the documented array protocol: null `out` asks for the count; otherwise up to
// *count entries are written (the rest of a longer array is set to NULL) and *count becomes the
// number written. `extra_out` (edge data) is zero-filled alongside when given.
CUresult ListNodes(const std::vector<GraphNode*>& nodes, CUgraphNode* out, CUgraphEdgeData* edges,
                   size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (out == nullptr) {
    *count = nodes.size();
    return CUDA_SUCCESS;
  }
  const size_t n = std::min(*count, nodes.size());
  for (size_t i = 0; i < *count; ++i) {
    out[i] = i < n ? nodes[i]->handle() : nullptr;
    if (edges != nullptr) edges[i] = CUgraphEdgeData{};
  }
  *count = n;
  return CUDA_SUCCESS;
}

CUresult GraphNodes(CUgraph h, CUgraphNode* out, size_t* count, bool roots_only) {
  if (CUresult r = RequireInit()) return r;
  auto graph = D().graphs.Get(h);
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  auto all = graph->Nodes();
  std::vector<GraphNode*> nodes;
  for (auto& node : all) {
    if (!roots_only || node->deps().empty()) nodes.push_back(node.get());
  }
  return ListNodes(nodes, out, nullptr, count);
}

CUresult Dependencies(CUgraphNode h, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node) return CUDA_ERROR_INVALID_VALUE;
  return ListNodes(node->deps(), out, edges, count);
}

// ---- executable graphs -------------------------------------------------------------------------

CUresult Instantiate(CUgraphExec* out, CUgraph h, unsigned long long flags) {
  if (CUresult r = RequireInit()) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto graph = D().graphs.Get(h);
  if (!graph || graph->capturing()) return CUDA_ERROR_INVALID_VALUE;
  const unsigned long long known =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) return CUDA_ERROR_NOT_SUPPORTED;
  std::vector<NodeOp> ops;
  for (auto& node : graph->Nodes()) ops.push_back(node->op());  // insertion = topological order
  auto exec = std::make_shared<GraphExec>(std::move(ops), flags);
  D().graph_execs.Add(exec);
  *out = exec->handle();
  return CUDA_SUCCESS;
}

// cuGraphInstantiate (CUDA 10.0 and 11.0 flavours): no flags, error node and log buffer.
CUresult InstantiateWithLog(CUgraphExec* out, CUgraph h, CUgraphNode* error_node, char* log,
                            size_t log_size) {
  CUresult r = Instantiate(out, h, 0);
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) {
    const char* text = r == CUDA_SUCCESS ? "" : "graph cannot be instantiated";
    std::strncpy(log, text, log_size - 1);
    log[log_size - 1] = '\0';
  }
  return r;
}

CUresult InstantiateWithParams(CUgraphExec* out, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS* p,
                               bool ptds) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  p->hErrNode_out = nullptr;
  CUresult r = CUDA_SUCCESS;
  if (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {  // uploading is a no-op here
    std::shared_ptr<Context> ctx;
    std::shared_ptr<Stream> stream;
    r = ResolveStream(p->hUploadStream, ptds, &ctx, &stream);
  }
  if (r == CUDA_SUCCESS) r = Instantiate(out, h, p->flags);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

CUresult Launch(CUgraphExec h, CUstream hStream, bool ptds) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(hStream, ptds, &ctx, &stream)) return r;
  auto exec = D().graph_execs.Get(h);
  if (!exec) return CUDA_ERROR_INVALID_VALUE;
  // Launching a graph into a capture (a child-graph node) is not simulated.
  if (CUresult r = RefuseDuringCapture(*stream, CUDA_ERROR_NOT_SUPPORTED)) return r;
  exec->Launch(ctx, stream);
  return ctx->sticky_error();
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamBeginCapture(CUstream h) {
  return BeginCapture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream h) {
  return BeginCapture(h, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  return BeginCapture(h, mode, false);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) {
  return BeginCapture(h, mode, true);
}
CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* g) { return EndCapture(h, g, false); }
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph* g) { return EndCapture(h, g, true); }

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream h, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return CaptureInfo(h, false, status, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream h, CUstreamCaptureStatus* status,
                                             cuuint64_t* id) {
  return CaptureInfo(h, true, status, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream h, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           size_t* count) {
  return CaptureInfo(h, false, status, id, graph, deps, nullptr, count);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream h, CUstreamCaptureStatus* status,
                                                cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps, size_t* count) {
  return CaptureInfo(h, true, status, id, graph, deps, nullptr, count);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           const CUgraphEdgeData** edges, size_t* count) {
  return CaptureInfo(h, false, status, id, graph, deps, edges, count);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus* status,
                                                cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps,
                                                const CUgraphEdgeData** edges, size_t* count) {
  return CaptureInfo(h, true, status, id, graph, deps, edges, count);
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = RequireInit()) return r;
  if (mode == nullptr || !ValidMode(mode)) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, memsim::ThreadCaptureMode());  // Note [capture modes]
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (CUresult r = RequireInit()) return r;
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto graph = std::make_shared<Graph>();
  D().graphs.Add(graph);
  *phGraph = graph->handle();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph) {
  if (CUresult r = RequireInit()) return r;
  auto graph = D().graphs.Get(hGraph);
  if (!graph || graph->capturing()) return CUDA_ERROR_INVALID_VALUE;
  if (D().graphs.Remove(hGraph)) graph->ReleaseNodes();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t count, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeOp op;
  if (CUresult r = KernelOp(p->func, nullptr, GeometryOf(*p), p->kernelParams, p->extra, &op)) {
    return r;
  }
  return AddNode(out, g, deps, count, std::move(op));
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                         size_t count, const CUDA_KERNEL_NODE_PARAMS_v2* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeOp op;
  if (CUresult r = KernelOp(p->func, p->kern, GeometryOf(*p), p->kernelParams, p->extra, &op)) {
    return r;
  }
  return AddNode(out, g, deps, count, std::move(op));
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return KernelParams(h, p);
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS_v2* p) {
  return KernelParams(h, p);  // kern and ctx stay NULL: func is set
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t count, const CUDA_MEMCPY3D* p, CUcontext ctx) {
  NodeOp op;
  if (CUresult r = MemcpyOp(p, ctx, &op)) return r;
  return AddNode(out, g, deps, count, std::move(op));
}

CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D* p) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node || p == nullptr || node->op().type != CU_GRAPH_NODE_TYPE_MEMCPY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *p = node->op().copy.desc;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t count, const CUDA_MEMSET_NODE_PARAMS* p,
                                      CUcontext ctx) {
  NodeOp op;
  if (CUresult r = MemsetOp(p, ctx, &op)) return r;
  return AddNode(out, g, deps, count, std::move(op));
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS* p) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node || p == nullptr || node->op().type != CU_GRAPH_NODE_TYPE_MEMSET) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *p = node->op().memset;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                    size_t count, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  NodeOp op;
  op.type = CU_GRAPH_NODE_TYPE_HOST;
  op.host.fn = p->fn;
  op.host.user = p->userData;
  return AddNode(out, g, deps, count, std::move(op));
}

CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS* p) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node || p == nullptr || node->op().type != CU_GRAPH_NODE_TYPE_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  p->fn = node->op().host.fn;
  p->userData = node->op().host.user;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                     size_t count) {
  return AddNode(out, g, deps, count, NodeOp{});
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  return GraphNodes(g, nodes, count, false);
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  return GraphNodes(g, nodes, count, true);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType* type) {
  if (CUresult r = RequireInit()) return r;
  auto node = D().graph_nodes.Get(h);
  if (!node || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = node->op().type;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode* deps, size_t* count) {
  return Dependencies(h, deps, nullptr, count);
}

CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode h, CUgraphNode* deps,
                                               CUgraphEdgeData* edges, size_t* count) {
  return Dependencies(h, deps, edges, count);
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* exec, CUgraph g, CUgraphNode* error_node,
                                    char* log, size_t log_size) {
  return InstantiateWithLog(exec, g, error_node, log, log_size);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph g, CUgraphNode* error_node,
                                       char* log, size_t log_size) {
  return InstantiateWithLog(exec, g, error_node, log, log_size);
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph g,
                                             unsigned long long flags) {
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD is only for cuGraphInstantiateWithParams.
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) return CUDA_ERROR_INVALID_VALUE;
  return Instantiate(exec, g, flags);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return InstantiateWithParams(exec, g, p, false);
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return InstantiateWithParams(exec, g, p, true);
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream h) { return Launch(exec, h, false); }
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream h) { return Launch(exec, h, true); }

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  if (CUresult r = RequireInit()) return r;
  // Launches in flight own copies of what they run: destruction need not wait for them.
  return D().graph_execs.Remove(exec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"

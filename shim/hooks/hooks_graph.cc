// Executable graphs: instantiation records what a graph references, launches
// make exactly that resident, updates and destruction forget the record (Note
// [graph residency] in shim_core_graph.cc).
#include "shim/hooks/hook_util.h"

using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;

namespace {

// After an instantiation: record the graph's references for the new exec.
CUresult Instantiated(CUresult r, const CUgraphExec* exec, CUgraph graph) {
  if (r != CUDA_SUCCESS || exec == nullptr) return r;
  if (ShimCore* core = Runtime::Get().core()) core->OnGraphInstantiate(*exec, graph);
  return r;
}

// Before a change to (or the destruction of) an exec: its record is dropped
// first, so no launch can use a stale one (its launches become opaque).
void Forget(CUgraphExec exec) {
  Runtime::Get().ForEachCore([exec](ShimCore* core) { core->OnGraphExecForget(exec); });
}

template <typename Fn>
CUresult GraphLaunch(Fn fn, CUgraphExec exec, CUstream stream, bool per_thread) {
  ShimCore* core = Runtime::Get().core();
  if (core == nullptr) return Forward(fn, exec, stream);
  ShimCore::Ticket ticket;
  CUresult r = core->BeforeGraphLaunch(exec, stream, per_thread, &ticket);
  if (r != CUDA_SUCCESS) return r;
  return Forward(fn, exec, stream);  // `ticket` closes the enqueue window after the call
}

}  // namespace

MEMSHIM_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return GraphLaunch(Real().cuGraphLaunch, exec, stream, false);
}
MEMSHIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  return GraphLaunch(Real().cuGraphLaunch_ptsz, exec, stream, true);
}

MEMSHIM_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error,
                                           char* log, size_t log_size) {
  return Instantiated(Forward(Real().cuGraphInstantiate, exec, graph, error, log, log_size), exec,
                      graph);
}
MEMSHIM_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error,
                                              char* log, size_t log_size) {
  return Instantiated(Forward(Real().cuGraphInstantiate_v2, exec, graph, error, log, log_size),
                      exec, graph);
}
MEMSHIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                    unsigned long long flags) {
  return Instantiated(Forward(Real().cuGraphInstantiateWithFlags, exec, graph, flags), exec, graph);
}
MEMSHIM_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return Instantiated(Forward(Real().cuGraphInstantiateWithParams, exec, graph, params), exec,
                      graph);
}
MEMSHIM_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                                          CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return Instantiated(Forward(Real().cuGraphInstantiateWithParams_ptsz, exec, graph, params), exec,
                      graph);
}

MEMSHIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  Forget(exec);  // before: the handle may be reused once the driver let it go
  return Forward(Real().cuGraphExecDestroy, exec);
}

// cuGraphExecUpdate leaves the exec with the parameters of `graph`: record
// those (on failure the exec keeps no record and is launched as opaque work).
MEMSHIM_EXPORT CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error,
                                          CUgraphExecUpdateResult* result) {
  Forget(exec);
  return Instantiated(Forward(Real().cuGraphExecUpdate, exec, graph, error, result), &exec, graph);
}
MEMSHIM_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph,
                                             CUgraphExecUpdateResultInfo* result) {
  Forget(exec);
  return Instantiated(Forward(Real().cuGraphExecUpdate_v2, exec, graph, result), &exec, graph);
}

// Per-node parameter changes of an exec: its launches are opaque from now on.
MEMSHIM_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  Forget(exec);
  return Forward(Real().cuGraphExecKernelNodeSetParams, exec, node, params);
}
MEMSHIM_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                          const CUDA_KERNEL_NODE_PARAMS* params) {
  Forget(exec);
  return Forward(Real().cuGraphExecKernelNodeSetParams_v2, exec, node, params);
}
MEMSHIM_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_MEMCPY3D* params, CUcontext ctx) {
  Forget(exec);
  return Forward(Real().cuGraphExecMemcpyNodeSetParams, exec, node, params, ctx);
}
MEMSHIM_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                       const CUDA_MEMSET_NODE_PARAMS* params,
                                                       CUcontext ctx) {
  Forget(exec);
  return Forward(Real().cuGraphExecMemsetNodeSetParams, exec, node, params, ctx);
}
MEMSHIM_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                           CUgraph child) {
  Forget(exec);
  return Forward(Real().cuGraphExecChildGraphNodeSetParams, exec, node, child);
}
MEMSHIM_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                 CUgraphNodeParams* params) {
  Forget(exec);
  return Forward(Real().cuGraphExecNodeSetParams, exec, node, params);
}

// GraphWalk: what the nodes of a CUDA graph may touch, read with the
// driver's graph queries alone (Note [graph residency] in shim_core_graph.cc).
//
// The walk is the driver-bound half of planning a graph's residency: it
// issues one or more driver queries per node (cuGraphGetNodes,
// cuGraphNodeGetType, cuGraphKernelNodeGetParams_v2,
// cuGraphMemcpyNodeGetParams, cuGraphMemsetNodeGetParams,
// cuGraphChildGraphNodeGetGraph) and reads no state of the shim, so the core
// runs it without its lock (Note [graph planning outside the lock]). What
// needs the core's state (kernel parameter layouts, which words and ranges
// fall in its reservation, hidden reach) is decided afterwards, under the
// lock, from the walk.
//
// Thread safety: WalkGraph touches nothing but its arguments and the
// driver; concurrent walks are independent.
#ifndef MEMVIRT_SHIM_CORE_GRAPH_WALK_H_
#define MEMVIRT_SHIM_CORE_GRAPH_WALK_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/core/mem_range.h"
#include "shim/driver/driver.h"

namespace memvirt::shim {

// A kernel node: either its function and kernelParams, or the words of its
// `extra` argument buffer.
struct GraphKernelNode {
  CUfunction function = nullptr;
  // The node's kernelParams as the driver returned them: owned by the node,
  // valid until the graph is destroyed or the node's parameters change
  // (cuGraphKernelNodeGetParams). Null for a node without them.
  void** params = nullptr;
  std::vector<uint64_t> extra_words;  // every aligned 8-byte word of the buffer
};

struct GraphWalk {
  bool decodable = true;
  const char* why = nullptr;  // the first reason it is not (a static string)
  size_t nodes = 0;           // nodes visited, children's included
  std::vector<GraphKernelNode> kernels;
  // The device side(s) of memcpy and memset nodes, wherever they point.
  std::vector<MemRange> ranges;
  // A kernel node passed its arguments in an `extra` buffer (Note [hidden
  // reach] in shim_core_hidden_reach.cc).
  bool extra_buffer = false;

  void MarkOpaque(const char* reason);
};

// Marks `record` (a GraphWalk, or a plan built from one: anything with
// `decodable` and `why`) unusable, keeping the first reason.
template <typename Record>
void MarkOpaque(Record* record, const char* reason) {
  if (record->decodable) record->why = reason;
  record->decodable = false;
}

inline void GraphWalk::MarkOpaque(const char* reason) { shim::MarkOpaque(this, reason); }

// Walks `graph` and its child graphs (up to 16 levels) into `walk`. A node
// the shim cannot decode (batch memory operations, conditional nodes, unknown
// types, unknown `extra` options) or a failed or missing query marks the walk
// opaque and ends it. Node types that cannot touch device memory the shim
// allocated (host, empty, event, external semaphore, graph memory
// allocation and free) add nothing.
void WalkGraph(const Driver& driver, CUgraph graph, GraphWalk* walk);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_GRAPH_WALK_H_

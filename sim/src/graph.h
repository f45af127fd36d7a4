// CUDA graphs and stream capture: the subset docs/sim.md lists.
//
// A Graph holds nodes in insertion order. A node can only depend on nodes that exist when it is
// added (the sim implements no cuGraphAddDependencies), so insertion order is a topological
// order. Node parameters are copied when the node is created (kernel arguments included), as
// the driver does. A GraphExec owns its own copy of every node's parameters and is independent
// of the graph it was instantiated from.
//
// Note [graph launch order]: a launch is one operation on the launch stream that runs the nodes
// one after another in insertion order. That is a linearization respecting every dependency:
// nodes a GPU might run concurrently run one after another, which is one of the schedules the
// GPU may choose. Work submitted to the stream by other threads runs wholly before or after the
// graph. Each launch gets fresh copies of the kernel arguments, and is ordered after the
// previous launch of the same GraphExec (on whichever stream), as the documentation requires.
//
// Note [capture]: cuStreamBeginCapture attaches a Capture to the stream; while it is attached,
// kernel launches, asynchronous copies and memsets and host functions issued to the stream
// become nodes of the capture's graph, each depending on the previously captured node, instead
// of stream work. Operations the sim cannot capture (event records and waits on a capturing
// stream, stream-ordered allocation, graph launches) and operations the documentation forbids
// during capture (synchronizing or querying the capturing stream, synchronous copies, callbacks)
// fail and invalidate the capture; cuStreamEndCapture then returns
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph. The capture graph is a live handle from
// cuStreamBeginCapture on (cuStreamGetCaptureInfo returns it) and belongs to the caller after a
// successful cuStreamEndCapture.
//
// Ownership: graphs, nodes and execs live in the driver's handle tables (driver.h); nodes are
// owned by their graph and leave the table when it is destroyed.
// Thread safety: thread-safe (the documentation leaves concurrent use of one graph object to the
// caller; the sim serializes it).
#ifndef MEMSIM_SRC_GRAPH_H_
#define MEMSIM_SRC_GRAPH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "copy_ops.h"
#include "cuda_api.h"
#include "launch.h"
#include "module.h"
#include "stream.h"

namespace memsim {

class Context;
class Graph;
class Stream;

struct KernelNodeParams {
  const Function* fn = nullptr;
  std::shared_ptr<Module> module;  // keeps the kernel's shared object loaded
  LaunchGeometry geometry{};
  std::shared_ptr<const PackedArgs> args;  // copied when the node was created
  bool via_extra = false;                  // created from an `extra` buffer
};

struct CopyNodeParams {
  CopyEnd dst, src;
  CopyShape shape;
  CUDA_MEMCPY3D desc{};  // what cuGraphMemcpyNodeGetParams reports
};

struct HostNodeParams {
  CUhostFn fn = nullptr;
  void* user = nullptr;
};

// One node's operation. `type` selects the meaningful member.
struct NodeOp {
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  KernelNodeParams kernel;
  CopyNodeParams copy;
  CUDA_MEMSET_NODE_PARAMS memset{};
  HostNodeParams host;
};

// The stream work of one node (a private copy of its kernel arguments); an empty node has no
// `run`.
StreamOp MakeStreamOp(Context* ctx, const NodeOp& op);

class GraphNode {
 public:
  GraphNode(Graph* graph, NodeOp op, std::vector<GraphNode*> deps);
  GraphNode(const GraphNode&) = delete;
  GraphNode& operator=(const GraphNode&) = delete;

  Graph* graph() const { return graph_; }
  const NodeOp& op() const { return op_; }
  const std::vector<GraphNode*>& deps() const { return deps_; }
  CUgraphNode handle() { return reinterpret_cast<CUgraphNode>(this); }
  // The `extra` array cuGraphKernelNodeGetParams reports for a node created from an `extra`
  // buffer; owned by the node.
  void** extra() { return extra_; }

 private:
  Graph* const graph_;
  const NodeOp op_;
  const std::vector<GraphNode*> deps_;
  size_t extra_size_ = 0;
  void* extra_[5] = {};
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  CUgraph handle() { return reinterpret_cast<CUgraph>(this); }

  // Adds a node depending on `deps` (distinct live nodes of this graph; CUDA_ERROR_INVALID_VALUE
  // otherwise) and registers it in the driver's node table.
  CUresult AddNode(NodeOp op, const CUgraphNode* deps, size_t count, GraphNode** out);
  // The nodes in insertion (topological) order.
  std::vector<std::shared_ptr<GraphNode>> Nodes();
  // Unregisters every node (cuGraphDestroy).
  void ReleaseNodes();
  // A capture sequence is recording into the graph: it may be neither destroyed nor
  // instantiated until the capture ends.
  bool capturing() const { return capturing_.load(std::memory_order_acquire); }
  void set_capturing(bool v) { capturing_.store(v, std::memory_order_release); }

 private:
  std::atomic<bool> capturing_{false};
  std::mutex mu_;
  std::vector<std::shared_ptr<GraphNode>> nodes_;
};

class GraphExec {
 public:
  GraphExec(std::vector<NodeOp> ops, unsigned long long flags)
      : ops_(std::move(ops)), flags_(flags) {}
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  CUgraphExec handle() { return reinterpret_cast<CUgraphExec>(this); }
  unsigned long long flags() const { return flags_; }
  // Enqueues the graph on `stream` (Note [graph launch order]).
  void Launch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream);

 private:
  const std::vector<NodeOp> ops_;
  const unsigned long long flags_;
  std::mutex mu_;  // serializes launches of this exec
  std::shared_ptr<Stream> last_stream_;
  uint64_t last_seq_ = 0;
};

// A capture sequence on one stream (Note [capture]).
class Capture {
 public:
  Capture(std::shared_ptr<Graph> graph, CUstreamCaptureMode mode, bool blocking);
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  const std::shared_ptr<Graph>& graph() const { return graph_; }
  CUstreamCaptureMode mode() const { return mode_; }
  uint64_t id() const { return id_; }
  std::thread::id thread() const { return thread_; }
  bool blocking() const { return blocking_; }

  // Appends `op` after the current dependencies. CUDA_ERROR_STREAM_CAPTURE_INVALIDATED once the
  // capture has been invalidated.
  CUresult Add(NodeOp op);
  void Invalidate();
  bool invalidated();
  // The nodes the next captured node will depend on; the array stays valid until the next call
  // on this capture.
  const std::vector<CUgraphNode>& Dependencies();

 private:
  const std::shared_ptr<Graph> graph_;
  const CUstreamCaptureMode mode_;
  const uint64_t id_;
  const std::thread::id thread_;
  const bool blocking_;
  std::mutex mu_;
  bool invalidated_ = false;
  std::vector<CUgraphNode> deps_;
  std::vector<CUgraphNode> deps_out_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_GRAPH_H_

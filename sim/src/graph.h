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
// Note [capture]: cuStreamBeginCapture attaches a Capture to the stream (its origin); while it
// is attached, kernel launches, asynchronous copies and memsets and host functions issued to
// the stream become nodes of the capture's graph, each depending on the stream's current
// dependencies (at first none, then the node captured last), instead of stream work.
// Operations the sim cannot capture (waits on events not recorded in the capture,
// stream-ordered allocation, graph launches) and operations the documentation forbids during
// capture (synchronizing or querying the capturing stream, synchronous copies, callbacks) fail
// and invalidate the capture; cuStreamEndCapture then returns
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph. The capture graph is a live handle from
// cuStreamBeginCapture on (cuStreamGetCaptureInfo returns it) and belongs to the caller after a
// successful cuStreamEndCapture.
//
// Note [cross-stream capture]: as the CUDA programming guide describes, an event recorded on a
// capturing stream becomes a captured event: it stands for that stream's current dependencies.
// A stream that waits on it joins the capture if it is not capturing (its next node depends on
// those nodes; its work is captured from then on), or, if it captures into the same graph,
// adds them to its dependencies. The capture ends on the origin stream only
// (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED elsewhere), after every joined stream has been joined
// back: each joined stream's dependencies must be ancestors of (or be) the origin's, otherwise
// the capture fails with CUDA_ERROR_STREAM_CAPTURE_UNJOINED and no graph. Ending or abandoning
// a capture takes every joined stream out of capture mode. A captured event cannot be queried
// or synchronized while its capture lasts; after that it counts as never recorded until it is
// recorded again.
//
// Ownership: graphs, nodes and execs live in the driver's handle tables (driver.h); nodes are
// owned by their graph and leave the table when it is destroyed.
// Thread safety: thread-safe (the documentation leaves concurrent use of one graph object to the
// caller; the sim serializes it).
#ifndef MEMSIM_SRC_GRAPH_H_
#define MEMSIM_SRC_GRAPH_H_

#include <atomic>
#include <cstdint>
#include <map>
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

// A capture sequence begun on an origin stream, and the streams that joined it through captured
// events (Note [capture], Note [cross-stream capture]). Streams are identified by address and
// held weakly (a stream holds its capture).
class Capture {
 public:
  Capture(std::shared_ptr<Graph> graph, CUstreamCaptureMode mode, const Stream* origin,
          bool blocking);
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  const std::shared_ptr<Graph>& graph() const { return graph_; }
  CUstreamCaptureMode mode() const { return mode_; }
  uint64_t id() const { return id_; }
  std::thread::id thread() const { return thread_; }
  // Of the origin stream.
  bool blocking() const { return blocking_; }
  const Stream* origin() const { return origin_; }

  // Appends `op` to `stream`'s work after its current dependencies.
  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED once the capture has been invalidated.
  CUresult Add(const Stream* stream, NodeOp op);
  void Invalidate();
  bool invalidated();
  // The nodes `stream`'s next captured node will depend on; the array stays valid until the
  // next call on this capture.
  const std::vector<CUgraphNode>& Dependencies(const Stream* stream);
  // What an event recorded on `stream` now stands for: a copy of its dependencies.
  std::vector<CUgraphNode> Snapshot(const Stream* stream);
  // Adds `nodes` (of this capture's graph) to the dependencies of `stream`, which joins the
  // capture when it is not the origin and has not joined yet.
  void Join(const std::shared_ptr<Stream>& stream, const std::vector<CUgraphNode>& nodes);
  // True when every joined stream's dependencies are the origin's or their ancestors.
  bool AllJoined();
  // The joined streams still alive (the origin excluded).
  std::vector<std::shared_ptr<Stream>> JoinedStreams();

 private:
  const std::shared_ptr<Graph> graph_;
  const CUstreamCaptureMode mode_;
  const uint64_t id_;
  const std::thread::id thread_;
  const Stream* const origin_;
  const bool blocking_;
  std::mutex mu_;
  bool invalidated_ = false;
  std::map<const Stream*, std::vector<CUgraphNode>> deps_;  // per stream; guarded by mu_
  std::vector<std::weak_ptr<Stream>> joined_;               // guarded by mu_
  std::vector<CUgraphNode> deps_out_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_GRAPH_H_

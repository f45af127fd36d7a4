#include "graph.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "context.h"
#include "driver.h"

namespace memsim {

namespace {
std::atomic<uint64_t> g_next_capture_id{1};
}  // namespace

StreamOp MakeStreamOp(Context* ctx, const NodeOp& op) {
  switch (op.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const KernelNodeParams& k = op.kernel;
      return MakeLaunchOp(ctx, k.module, k.fn, k.geometry,
                          ClonePackedArgs(*k.args, k.fn->layout()));
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      return MakeCopyOp(ctx, op.copy.dst, op.copy.src, op.copy.shape);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return MakeMemsetOp(ctx, op.memset.dst, op.memset.pitch, op.memset.value,
                          op.memset.elementSize, op.memset.width, op.memset.height);
    case CU_GRAPH_NODE_TYPE_HOST: {
      StreamOp s;
      s.device_work = false;
      s.run = [ctx, fn = op.host.fn, user = op.host.user] {
        if (ctx->sticky_error() == CUDA_SUCCESS) fn(user);  // as cuLaunchHostFunc
      };
      return s;
    }
    default:
      return StreamOp{};  // empty node
  }
}

GraphNode::GraphNode(Graph* graph, NodeOp op, std::vector<GraphNode*> deps)
    : graph_(graph), op_(std::move(op)), deps_(std::move(deps)) {
  if (op_.type == CU_GRAPH_NODE_TYPE_KERNEL && op_.kernel.via_extra) {
    extra_size_ = op_.kernel.args->bytes;
    extra_[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    extra_[1] = const_cast<uint64_t*>(op_.kernel.args->buffer.data());
    extra_[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    extra_[3] = &extra_size_;
    extra_[4] = CU_LAUNCH_PARAM_END;
  }
}

CUresult Graph::AddNode(NodeOp op, const CUgraphNode* deps, size_t count, GraphNode** out) {
  if (count > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GraphNode*> dep_nodes;
  std::unordered_set<const GraphNode*> seen;
  for (size_t i = 0; i < count; ++i) {
    auto node = Driver::Get().graph_nodes.Get(deps[i]);
    if (!node || node->graph() != this || !seen.insert(node.get()).second) {
      return CUDA_ERROR_INVALID_VALUE;  // foreign, destroyed or duplicate dependency
    }
    dep_nodes.push_back(node.get());
  }
  auto node = std::make_shared<GraphNode>(this, std::move(op), std::move(dep_nodes));
  Driver::Get().graph_nodes.Add(node);
  nodes_.push_back(node);
  *out = node.get();
  return CUDA_SUCCESS;
}

std::vector<std::shared_ptr<GraphNode>> Graph::Nodes() {
  std::lock_guard<std::mutex> lock(mu_);
  return nodes_;
}

void Graph::ReleaseNodes() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& node : nodes_) Driver::Get().graph_nodes.Remove(node.get());
  nodes_.clear();
}

void GraphExec::Launch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream) {
  std::vector<StreamOp> steps;
  steps.reserve(ops_.size());
  for (const NodeOp& op : ops_) {
    StreamOp s = MakeStreamOp(ctx.get(), op);
    if (s.run) steps.push_back(std::move(s));
  }
  Context* raw = ctx.get();
  StreamOp launch;
  launch.device_work = false;  // each step decides for itself (Note [sticky errors])
  launch.run = [raw, steps = std::move(steps)] {
    for (const StreamOp& s : steps) {
      if (!s.device_work || raw->sticky_error() == CUDA_SUCCESS) s.run();
    }
  };
  std::lock_guard<std::mutex> lock(mu_);
  if (last_stream_ != nullptr && last_stream_ != stream && !last_stream_->IsDone(last_seq_)) {
    launch.deps.emplace_back(last_stream_, last_seq_);  // after the previous launch
  }
  last_seq_ = ctx->Enqueue(stream, std::move(launch));
  last_stream_ = stream;
}

Capture::Capture(std::shared_ptr<Graph> graph, CUstreamCaptureMode mode, const Stream* origin,
                 bool blocking)
    : graph_(std::move(graph)),
      mode_(mode),
      id_(g_next_capture_id.fetch_add(1, std::memory_order_relaxed)),
      thread_(std::this_thread::get_id()),
      origin_(origin),
      blocking_(blocking) {}

CUresult Capture::Add(const Stream* stream, NodeOp op) {
  std::lock_guard<std::mutex> lock(mu_);
  if (invalidated_) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  std::vector<CUgraphNode>& deps = deps_[stream];
  GraphNode* node = nullptr;
  if (CUresult r = graph_->AddNode(std::move(op), deps.data(), deps.size(), &node)) {
    invalidated_ = true;  // an error during capture invalidates it
    return r;
  }
  deps.assign(1, node->handle());
  return CUDA_SUCCESS;
}

void Capture::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  invalidated_ = true;
}

bool Capture::invalidated() {
  std::lock_guard<std::mutex> lock(mu_);
  return invalidated_;
}

const std::vector<CUgraphNode>& Capture::Dependencies(const Stream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  deps_out_ = deps_[stream];
  return deps_out_;
}

std::vector<CUgraphNode> Capture::Snapshot(const Stream* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  return deps_[stream];
}

void Capture::Join(const std::shared_ptr<Stream>& stream, const std::vector<CUgraphNode>& nodes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, joining] = deps_.try_emplace(stream.get());
  if (joining && stream.get() != origin_) joined_.push_back(stream);
  for (CUgraphNode n : nodes) {
    if (std::find(it->second.begin(), it->second.end(), n) == it->second.end()) {
      it->second.push_back(n);
    }
  }
}

bool Capture::AllJoined() {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_set<const GraphNode*> reached;
  std::vector<const GraphNode*> todo;
  for (CUgraphNode n : deps_[origin_]) todo.push_back(reinterpret_cast<const GraphNode*>(n));
  while (!todo.empty()) {
    const GraphNode* n = todo.back();
    todo.pop_back();
    if (!reached.insert(n).second) continue;
    todo.insert(todo.end(), n->deps().begin(), n->deps().end());
  }
  for (const auto& [stream, deps] : deps_) {
    for (CUgraphNode n : deps) {
      if (reached.count(reinterpret_cast<const GraphNode*>(n)) == 0) return false;
    }
  }
  return true;
}

std::vector<std::shared_ptr<Stream>> Capture::JoinedStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Stream>> out;
  for (const auto& w : joined_) {
    if (auto s = w.lock()) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace memsim

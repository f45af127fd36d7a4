// ShimCore, graph part: residency for executable graphs (declared in
// shim_core.h with the rest of the core; same lock, same thread safety).
//
// Note [graph residency]
//   An opaque launch (Note [host mapping] in shim_core.h) backs every
//   allocated chunk, awaits every fill, counts as a use of every chunk and
//   reads evicted data through its host mapping. A graph launch need not be
//   opaque: each executable graph gets a record when it is instantiated: the
//   graph is walked with the driver's own queries (cuGraphGetNodes,
//   cuGraphNodeGetType, cuGraphKernelNodeGetParams_v2,
//   cuGraphMemcpyNodeGetParams, cuGraphMemsetNodeGetParams, and
//   cuGraphChildGraphNodeGetGraph for child graphs), kernel arguments are
//   decoded with the layout launches use (cuFuncGetParamInfo, or the `extra`
//   buffer), and the argument words that fall in the reservation plus the
//   device ranges of memcpy/memset nodes are kept. A launch then touches
//   exactly those (each word expands to its whole block, as for a launch)
//   and makes them resident like one big launch: fills on the copy stream,
//   the launch stream waits on one event, the launch is one use of each
//   chunk. Words are kept rather than blocks, so a block freed and
//   reallocated at the same address between launches is still found.
//
//   Node types that cannot touch the shim's memory (host, empty, event,
//   external semaphore, graph memory alloc/free: that memory is the driver's)
//   add nothing. Anything else (batch memory operations, conditional nodes,
//   unknown types, a kernel without parameter information, a driver lacking
//   the queries) leaves the exec without a usable record, and its launches
//   stay opaque. Exec updates (cuGraphExec*SetParams, cuGraphExecUpdate) drop
//   the record before they run; the hooks re-record after cuGraphExecUpdate.
//   Like launches, graphs whose kernels follow pointers stored in device
//   memory are not covered (see Note [host mapping]: such reads still work,
//   from host memory).
#include <algorithm>
#include <cstring>

#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {
namespace {

constexpr int kMaxGraphDepth = 16;

// The device bytes one side of a cuMemcpy3D descriptor may touch.
MemRange CopySide(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t z, size_t pitch,
                  size_t plane_rows, size_t width, size_t height, size_t depth) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0 ||
      depth == 0 || width == 0) {
    return {};
  }
  if (pitch == 0) pitch = width;
  if (plane_rows == 0) plane_rows = height;
  return {device + (z * plane_rows + y) * pitch + x,
          ((depth - 1) * plane_rows + (height - 1)) * pitch + width};
}

// Marks a plan unusable, keeping the first reason.
template <typename Plan>
void MarkOpaque(Plan* plan, const char* why) {
  if (plan->decodable) plan->why = why;
  plan->decodable = false;
}

}  // namespace

void ShimCore::PlanKernelNode(CUgraphNode node, GraphPlan* plan) {
  if (driver_->cuGraphKernelNodeGetParams_v2 == nullptr) {
    MarkOpaque(plan, "the driver lacks cuGraphKernelNodeGetParams_v2");
    return;
  }
  CUDA_KERNEL_NODE_PARAMS_v2 p;
  std::memset(&p, 0, sizeof(p));
  if (driver_->cuGraphKernelNodeGetParams_v2(node, &p) != CUDA_SUCCESS) {
    MarkOpaque(plan, "kernel node parameters unavailable");
    return;
  }
  auto keep = [&](const char* at) MEMSHIM_REQUIRES(mu_) {
    uint64_t word;
    memcpy(&word, at, sizeof(word));
    if (table_.Contains(word)) plan->words.push_back(word);
  };
  if (p.kernelParams != nullptr) {
    CUfunction f = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
    if (f == nullptr || !layouts_.Of(f).known) {
      MarkOpaque(plan, "a kernel without parameter information");
      return;
    }
    if (HidesAnAddress(layouts_.Of(f), p.kernelParams)) {  // Note [hidden reach]
      MarkOpaque(plan, "a kernel whose structure parameter may hide an address");
      return;
    }
    for (const ArgWord& w : layouts_.Of(f).words) {
      const char* at = static_cast<const char*>(p.kernelParams[w.param]);
      if (at != nullptr) keep(at + w.offset);
    }
    return;
  }
  if (p.extra == nullptr) return;  // no arguments
  const char* buffer = nullptr;
  size_t bytes = 0;
  for (void** e = p.extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      buffer = static_cast<const char*>(e[1]);
    } else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE && e[1] != nullptr) {
      bytes = *static_cast<const size_t*>(e[1]);
    } else {
      MarkOpaque(plan, "an unknown kernel `extra` option");
      return;
    }
  }
  if (buffer != nullptr) plan->extra_buffer = true;  // Note [hidden reach]
  for (size_t off = 0; buffer != nullptr && off + sizeof(uint64_t) <= bytes; off += 8) {
    keep(buffer + off);
  }
}

void ShimCore::PlanGraph(CUgraph graph, int depth, GraphPlan* plan) {
  auto fail = [plan](const char* why) { MarkOpaque(plan, why); };
  if (depth > kMaxGraphDepth) return fail("child graphs nested too deeply");
  if (driver_->cuGraphGetNodes == nullptr || driver_->cuGraphNodeGetType == nullptr) {
    return fail("the driver lacks graph queries");
  }
  size_t n = 0;
  if (driver_->cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS) {
    return fail("cuGraphGetNodes failed");
  }
  std::vector<CUgraphNode> nodes(n);
  if (n > 0 && driver_->cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) {
    return fail("cuGraphGetNodes failed");
  }
  nodes.resize(std::min(n, nodes.size()));
  for (CUgraphNode node : nodes) {
    if (!plan->decodable) return;
    ++plan->nodes;
    CUgraphNodeType type;
    if (driver_->cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) {
      return fail("cuGraphNodeGetType failed");
    }
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        PlanKernelNode(node, plan);
        break;
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        CUDA_MEMCPY3D c;
        std::memset(&c, 0, sizeof(c));
        if (driver_->cuGraphMemcpyNodeGetParams == nullptr ||
            driver_->cuGraphMemcpyNodeGetParams(node, &c) != CUDA_SUCCESS) {
          return fail("memcpy node parameters unavailable");
        }
        const size_t depth3 = c.Depth == 0 ? 1 : c.Depth;
        for (const MemRange& r :
             {CopySide(c.srcMemoryType, c.srcDevice, c.srcXInBytes, c.srcY, c.srcZ, c.srcPitch,
                       c.srcHeight, c.WidthInBytes, c.Height, depth3),
              CopySide(c.dstMemoryType, c.dstDevice, c.dstXInBytes, c.dstY, c.dstZ, c.dstPitch,
                       c.dstHeight, c.WidthInBytes, c.Height, depth3)}) {
          if (r.bytes != 0 && table_.Contains(r.ptr)) plan->ranges.push_back(r);
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMSET: {
        CUDA_MEMSET_NODE_PARAMS m;
        std::memset(&m, 0, sizeof(m));
        if (driver_->cuGraphMemsetNodeGetParams == nullptr ||
            driver_->cuGraphMemsetNodeGetParams(node, &m) != CUDA_SUCCESS) {
          return fail("memset node parameters unavailable");
        }
        if (m.width != 0 && m.height != 0 && table_.Contains(m.dst)) {
          const uint64_t row = static_cast<uint64_t>(m.width) * m.elementSize;
          plan->ranges.push_back({m.dst, (m.height - 1) * m.pitch + row});
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph child = nullptr;
        if (driver_->cuGraphChildGraphNodeGetGraph == nullptr ||
            driver_->cuGraphChildGraphNodeGetGraph(node, &child) != CUDA_SUCCESS) {
          return fail("child graph unavailable");
        }
        PlanGraph(child, depth + 1, plan);
        break;
      }
      case CU_GRAPH_NODE_TYPE_HOST:
      case CU_GRAPH_NODE_TYPE_EMPTY:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
      case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:  // the driver's graph memory, not the shim's
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        break;
      default:  // batch memory operations, conditional nodes, newer types
        return fail("a node type the shim cannot decode");
    }
  }
}

void ShimCore::OnGraphInstantiate(CUgraphExec exec, CUgraph graph) {
  MutexLock lock(&mu_);
  GraphPlan plan;
  PlanGraph(graph, 0, &plan);
  std::sort(plan.words.begin(), plan.words.end());
  plan.words.erase(std::unique(plan.words.begin(), plan.words.end()), plan.words.end());
  if (plan.decodable) {
    MEMSHIM_LOG(kInfo,
                "graph exec %p: %zu nodes; each launch makes the blocks of %zu argument words and "
                "%zu copy/memset ranges resident",
                static_cast<void*>(exec), plan.nodes, plan.words.size(), plan.ranges.size());
  } else {
    MEMSHIM_LOG(kInfo, "graph exec %p: %s; its launches are opaque", static_cast<void*>(exec),
                plan.why);
    plan.words.clear();
    plan.ranges.clear();
  }
  graph_plans_[exec] = std::move(plan);
}

void ShimCore::OnGraphExecForget(CUgraphExec exec) {
  MutexLock lock(&mu_);
  auto it = graph_plans_.find(exec);
  if (it == graph_plans_.end()) return;
  MEMSHIM_LOG(kInfo,
              "graph exec %p retired: resident_set %s graph_launches %llu graph_page_ins %llu "
              "opaque_launches %llu",
              static_cast<void*>(exec), it->second.decodable ? "yes" : "no",
              static_cast<unsigned long long>(it->second.launches),
              static_cast<unsigned long long>(it->second.page_ins),
              static_cast<unsigned long long>(stats_.opaque_launches));
  graph_plans_.erase(it);
}

CUresult ShimCore::ReferencesLocked(const uint64_t* words, size_t num_words, const MemRange* ranges,
                                    size_t num_ranges, uint32_t stream, bool capturing,
                                    bool extra_buffer, Ticket* ticket) {
  ++stamp_;
  ClearTouched();
  ScanBytes(words, num_words * sizeof(uint64_t));  // each word as a launch argument
  for (size_t i = 0; i < num_ranges; ++i) TouchRange(ranges[i]);
  // As for a kernel launch (Note [hidden reach]): a graph whose kernels read
  // pointer arrays, or one with an `extra` buffer, is a fence.
  if (const Reach reach = extra_buffer ? Reach::kUnknown : TouchedReach(); reach != Reach::kNamed) {
    return FencedLocked(stream, capturing, reach, ticket);
  }
  return MakeResident(stream, /*host_wait=*/false, capturing, ticket);
}

CUresult ShimCore::BeforeReferences(const uint64_t* words, size_t num_words, const MemRange* ranges,
                                    size_t num_ranges, CUstream stream, bool per_thread,
                                    Ticket* ticket) {
  MutexLock lock(&mu_);
  ++stats_.launches;
  ProcessDeferred();
  const uint32_t index = tracker_->IndexOf(stream, per_thread);
  const bool capturing = IsCapturing(tracker_->HandleOf(index));
  return ReferencesLocked(words, num_words, ranges, num_ranges, index, capturing,
                          /*extra_buffer=*/false, ticket);
}

CUresult ShimCore::BeforeGraphLaunch(CUgraphExec exec, CUstream stream, bool per_thread,
                                     Ticket* ticket) {
  MutexLock lock(&mu_);
  ++stats_.launches;
  ProcessDeferred();
  const uint32_t index = tracker_->IndexOf(stream, per_thread);
  const bool capturing = IsCapturing(tracker_->HandleOf(index));
  auto it = graph_plans_.find(exec);
  if (it == graph_plans_.end() || !it->second.decodable) {
    if (it != graph_plans_.end()) ++it->second.launches;
    ++stamp_;
    return OpaqueLocked(index, capturing, ticket);
  }
  GraphPlan& plan = it->second;
  const uint64_t page_ins = stats_.page_ins;
  CUresult r = ReferencesLocked(plan.words.data(), plan.words.size(), plan.ranges.data(),
                                plan.ranges.size(), index, capturing, plan.extra_buffer, ticket);
  ++plan.launches;
  plan.page_ins += stats_.page_ins - page_ins;
  return r;
}

bool ShimCore::StreamCapturing(CUstream stream, bool per_thread) {
  MutexLock lock(&mu_);
  if (captures_active_ == 0) return false;
  return IsCapturing(tracker_->HandleOf(tracker_->IndexOf(stream, per_thread)));
}

ShimCore::GraphPlanInfo ShimCore::TEST_GraphPlanOf(CUgraphExec exec) {
  MutexLock lock(&mu_);
  GraphPlanInfo info;
  auto it = graph_plans_.find(exec);
  if (it == graph_plans_.end()) return info;
  info.known = true;
  info.decodable = it->second.decodable;
  info.nodes = it->second.nodes;
  info.words = it->second.words.size();
  info.ranges = it->second.ranges.size();
  info.launches = it->second.launches;
  info.page_ins = it->second.page_ins;
  return info;
}

}  // namespace memvirt::shim

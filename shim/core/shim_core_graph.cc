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
//
// Note [graph planning outside the lock]
//   Walking a graph costs driver queries per node (thousands for a captured
//   training step) and needs nothing of the core, so OnGraphInstantiate walks
//   it (WalkGraph, graph_walk.h) before taking the core lock; other threads'
//   launches, copies and allocations proceed meanwhile. Under the lock it
//   only decides, from the walk, what the core's state tells: each kernel's
//   parameter layout (the cache, asking the driver for a kernel it has not
//   seen, as a launch does), whether a structure parameter may hide an
//   address, and which words and ranges fall in the reservation. The
//   kernelParams the walk returns are the nodes' own storage, valid while the
//   application's call to instantiate runs (the graph cannot be destroyed
//   before it returns).
#include <algorithm>
#include <cstring>

#include "shim/core/graph_walk.h"
#include "shim/core/log.h"
#include "shim/core/shim_core.h"

namespace memvirt::shim {

void ShimCore::PlanKernelNode(const GraphKernelNode& kernel, GraphPlan* plan) {
  auto keep = [&](uint64_t word) MEMSHIM_REQUIRES(mu_) {
    if (table_.Contains(word)) plan->words.push_back(word);
  };
  if (kernel.params == nullptr) {  // an `extra` buffer, or no arguments
    for (uint64_t word : kernel.extra_words) keep(word);
    return;
  }
  const ParamLayout& layout = layouts_.Of(kernel.function);
  if (!layout.known) return MarkOpaque(plan, "a kernel without parameter information");
  if (HidesAnAddress(layout, kernel.params)) {  // Note [hidden reach]
    return MarkOpaque(plan, "a kernel whose structure parameter may hide an address");
  }
  for (const ArgWord& w : layout.words) {
    const char* at = static_cast<const char*>(kernel.params[w.param]);
    if (at == nullptr) continue;
    uint64_t word;
    std::memcpy(&word, at + w.offset, sizeof(word));
    keep(word);
  }
}

void ShimCore::OnGraphInstantiate(CUgraphExec exec, CUgraph graph) {
  GraphWalk walk;
  WalkGraph(*driver_, graph, &walk);  // Note [graph planning outside the lock]
  MutexLock lock(&mu_);
  GraphPlan plan;
  plan.nodes = walk.nodes;
  plan.extra_buffer = walk.extra_buffer;
  if (!walk.decodable) MarkOpaque(&plan, walk.why);
  for (size_t i = 0; i < walk.kernels.size() && plan.decodable; ++i) {
    PlanKernelNode(walk.kernels[i], &plan);
  }
  for (const MemRange& r : walk.ranges) {
    if (table_.Contains(r.ptr)) plan.ranges.push_back(r);
  }
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
  touch_->Begin();
  touch_->Bytes(words, num_words * sizeof(uint64_t));  // each word as a launch argument
  for (size_t i = 0; i < num_ranges; ++i) touch_->Range(ranges[i]);
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
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    if (!call_.repeating) ++stats_.launches;
    if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
    const uint32_t index = tracker_->IndexOf(stream, per_thread);
    const bool capturing = IsCapturing(tracker_->HandleOf(index));
    return ReferencesLocked(words, num_words, ranges, num_ranges, index, capturing,
                            /*extra_buffer=*/false, ticket);
  });
}

CUresult ShimCore::BeforeGraphLaunch(CUgraphExec exec, CUstream stream, bool per_thread,
                                     Ticket* ticket) {
  return RunWithWaitsOutsideLock([&]() MEMSHIM_REQUIRES(mu_) {
    if (!call_.repeating) ++stats_.launches;
    if (const CUresult r = BeginChunkOperation(); r != CUDA_SUCCESS) return r;
    const uint32_t index = tracker_->IndexOf(stream, per_thread);
    const bool capturing = IsCapturing(tracker_->HandleOf(index));
    auto it = graph_plans_.find(exec);  // looked up on each run: the lock was released between
    if (it == graph_plans_.end() || !it->second.decodable) {
      if (it != graph_plans_.end() && !call_.repeating) ++it->second.launches;
      touch_->Begin();
      return OpaqueLocked(index, capturing, ticket);
    }
    GraphPlan& plan = it->second;
    const uint64_t page_ins = stats_.page_ins;
    CUresult r = ReferencesLocked(plan.words.data(), plan.words.size(), plan.ranges.data(),
                                  plan.ranges.size(), index, capturing, plan.extra_buffer, ticket);
    if (!call_.repeating) ++plan.launches;
    plan.page_ins += stats_.page_ins - page_ins;
    return r;
  });
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

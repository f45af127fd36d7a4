#include "replay_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace memvirt::replay {

absl::StatusOr<ReplayPlan> MakeReplayPlan(const trace::Trace& trace, double scale,
                                          double time_scale, int max_slots) {
  if (!(scale > 0) || !(time_scale > 0)) {
    return absl::InvalidArgumentError("scale and time scale must be > 0");
  }
  ReplayPlan plan;
  const size_t n = trace.tensors.size();
  std::unordered_map<uint64_t, uint32_t> index;
  for (size_t i = 0; i < n; ++i) {
    index[trace.tensors[i].id] = static_cast<uint32_t>(i);
    const double scaled =
        std::ceil(static_cast<double>(trace.tensors[i].bytes) * scale / 8.0) * 8.0;
    plan.bytes.push_back(std::max<uint64_t>(8, static_cast<uint64_t>(scaled)));
  }
  std::unordered_map<uint64_t, size_t> kernel_index;
  for (size_t k = 0; k < trace.kernels.size(); ++k) kernel_index[trace.kernels[k].id] = k;
  std::vector<int64_t> first(n, -1), last(n, -1), freed(n, -1);
  plan.needs_init.assign(n, false);
  plan.kernels.resize(trace.kernels.size());
  for (size_t k = 0; k < trace.kernels.size(); ++k) {
    const trace::TraceKernel& tk = trace.kernels[k];
    std::map<uint32_t, uint8_t> modes;  // read 1, write 2
    for (uint64_t id : tk.reads) modes[index.at(id)] |= 1;
    for (uint64_t id : tk.writes) modes[index.at(id)] |= 2;
    PlannedKernel& pk = plan.kernels[k];
    pk.us = tk.us * time_scale;
    plan.ideal_us += pk.us;
    for (const auto& [t, m] : modes) {
      if (first[t] < 0) {
        first[t] = static_cast<int64_t>(k);
        plan.needs_init[t] = (m & 1) != 0;
      }
      last[t] = static_cast<int64_t>(k);
      if (m & 1) pk.slots.push_back({t, false});
    }
    for (const auto& [t, m] : modes) {
      if (m & 2) pk.slots.push_back({t, true});
    }
    if (static_cast<int>(pk.slots.size()) > max_slots) {
      return absl::InvalidArgumentError(absl::StrCat("kernel ", tk.id, " (", tk.name, ") needs ",
                                                     pk.slots.size(), " argument slots, more than ",
                                                     max_slots));
    }
  }
  for (const trace::TraceFree& f : trace.frees) {
    const uint32_t t = index.at(f.tensor);
    freed[t] = std::max<int64_t>(freed[t], static_cast<int64_t>(kernel_index.at(f.after_kernel)));
  }
  uint64_t live = 0;
  for (size_t t = 0; t < n; ++t) {
    if (first[t] < 0) continue;
    if (trace.tensors[t].persistent) {
      plan.persistent.push_back(static_cast<uint32_t>(t));
      plan.needs_init[t] = true;  // persistent data exists before the first kernel
      live += plan.bytes[t];
      continue;
    }
    plan.kernels[first[t]].allocate.push_back(static_cast<uint32_t>(t));
    plan.kernels[std::max(last[t], freed[t])].release.push_back(static_cast<uint32_t>(t));
  }
  for (const PlannedKernel& k : plan.kernels) {
    for (uint32_t t : k.allocate) live += plan.bytes[t];
    plan.peak_bytes = std::max(plan.peak_bytes, live);
    for (uint32_t t : k.release) live -= plan.bytes[t];
  }
  return plan;
}

trace::Trace LaunchedTrace(const trace::Trace& scaled, const ReplayPlan& plan, uint64_t* prologue) {
  trace::Trace out = scaled;
  uint64_t next_id = 0;
  for (const trace::TraceTensor& t : scaled.tensors) next_id = std::max(next_id, t.id + 1);
  for (const trace::TraceKernel& k : scaled.kernels) next_id = std::max(next_id, k.id + 1);
  const uint64_t counter = next_id++;
  out.tensors.insert(out.tensors.begin(), trace::TraceTensor{counter, 8, "other", true});
  out.kernels.clear();
  auto init = [&](uint64_t tensor) {
    trace::TraceKernel k;
    k.id = next_id++;
    k.name = "replay_init";
    if (tensor != counter) k.reads = {counter};
    k.writes = {tensor};
    out.kernels.push_back(std::move(k));
  };
  init(counter);  // cuMemsetD32 of the counter
  for (uint32_t t : plan.persistent) {
    if (plan.needs_init[t]) init(scaled.tensors[t].id);
  }
  *prologue = out.kernels.size();
  for (size_t k = 0; k < scaled.kernels.size(); ++k) {
    for (uint32_t t : plan.kernels[k].allocate) {
      if (plan.needs_init[t]) init(scaled.tensors[t].id);
    }
    trace::TraceKernel kernel = scaled.kernels[k];
    kernel.reads.push_back(counter);
    out.kernels.push_back(std::move(kernel));
  }
  return out;
}

}  // namespace memvirt::replay

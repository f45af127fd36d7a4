// JSON rendering of a SimResult (fixed member order and number formats, so
// identical runs print identical bytes).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "memvirt/policy/simulator.h"

namespace memvirt::policy {
namespace {

std::string Us(double v) { return absl::StrFormat("%.3f", v); }

void AppendStats(std::string* out, const IterationStats& s) {
  absl::StrAppend(
      out, "\"time_us\":", Us(s.time_us), ",\"stall_us\":", Us(s.stall_us),
      ",\"h2d_bytes\":", s.h2d_bytes, ",\"d2h_bytes\":", s.d2h_bytes,
      ",\"ssd_read_bytes\":", s.ssd_read_bytes, ",\"ssd_write_bytes\":", s.ssd_write_bytes,
      ",\"demand_fetches\":", s.demand_fetches, ",\"prefetches\":", s.prefetches,
      ",\"evictions\":", s.evictions, ",\"evict_ahead\":", s.evict_ahead,
      ",\"dead_drops\":", s.dead_drops, ",\"staged\":", s.staged, ",\"faults\":", s.faults,
      ",\"write_back_unread_bytes\":", s.write_back_unread_bytes,
      ",\"write_back_carried_bytes\":", s.write_back_carried_bytes);
}

}  // namespace

std::string FormatResultJson(const SimResult& r, const SimConfig& c) {
  std::string out = "{";
  absl::StrAppend(
      &out, "\"policy\":\"", r.policy, "\",\"chunk_bytes\":", c.chunk_bytes,
      ",\"small_granularity_bytes\":", c.small_granularity, ",\"iterations\":", c.iterations,
      ",\"prefetch\":", UsesLookahead(c) ? "true" : "false",
      ",\"device_memory_bytes\":", c.device_bytes, ",\"host_memory_bytes\":", c.host_bytes,
      ",\"pcie_gbps\":", absl::StrFormat("%.3f", c.pcie_gbps),
      ",\"ssd_gbps\":", absl::StrFormat("%.3f", c.ssd_gbps), ",\"ideal_us\":", Us(r.ideal_us),
      ",\"slowdown\":", absl::StrFormat("%.6f", r.slowdown), ",");
  AppendStats(&out, r.reported);
  absl::StrAppend(
      &out, ",\"traffic_bytes\":", r.reported.h2d_bytes + r.reported.d2h_bytes,
      ",\"peak_live_bytes\":", r.peak_live_bytes, ",\"peak_device_bytes\":", r.peak_device_bytes,
      ",\"max_kernel_bytes\":", r.max_kernel_bytes, ",\"blocks\":", r.blocks,
      ",\"kernels\":", r.kernels, ",\"time_lower_bound_us\":", Us(r.time_lower_bound_us),
      ",\"slowdown_lower_bound\":",
      absl::StrFormat("%.6f", r.ideal_us > 0 ? r.time_lower_bound_us / r.ideal_us : 1.0),
      ",\"per_iteration\":[");
  for (size_t i = 0; i < r.per_iteration.size(); ++i) {
    absl::StrAppend(&out, i ? "," : "", "{");
    AppendStats(&out, r.per_iteration[i]);
    out += "}";
  }
  out += "]}";
  return out;
}

}  // namespace memvirt::policy

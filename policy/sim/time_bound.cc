#include "memvirt/policy/time_bound.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace memvirt::policy {
namespace {

struct Use {
  uint32_t tensor = 0;
  bool reads = false;
  bool writes = false;
  // The tensor's next access after this one reads its data (for persistent
  // tensors the sequence wraps to the next iteration).
  bool read_next = false;
};

}  // namespace

double TimeLowerBoundUs(const trace::Trace& trace, uint64_t device_bytes, uint64_t host_bytes,
                        double pcie_gbps, double ssd_gbps) {
  const size_t n = trace.kernels.size();
  std::unordered_map<uint64_t, uint32_t> index;
  for (size_t t = 0; t < trace.tensors.size(); ++t) index[trace.tensors[t].id] = t;
  // Per kernel: its tensors, and whether it reads each one.
  std::vector<std::vector<Use>> uses(n);
  std::vector<int64_t> first_use(trace.tensors.size(), -1);
  for (size_t k = 0; k < n; ++k) {
    std::unordered_map<uint32_t, Use> by_tensor;
    for (uint64_t id : trace.kernels[k].writes) {
      Use& u = by_tensor[index.at(id)];
      u.tensor = index.at(id);
      u.writes = true;
    }
    for (uint64_t id : trace.kernels[k].reads) {
      Use& u = by_tensor[index.at(id)];
      u.tensor = index.at(id);
      u.reads = true;
    }
    for (const auto& [t, u] : by_tensor) {
      uses[k].push_back(u);
      if (first_use[t] < 0) first_use[t] = static_cast<int64_t>(k);
    }
    std::sort(uses[k].begin(), uses[k].end(),
              [](const Use& a, const Use& b) { return a.tensor < b.tensor; });
  }
  // read_next: walk backwards remembering each tensor's following access.
  std::vector<int8_t> following(trace.tensors.size(), -1);  // -1 none, 0 write, 1 read
  for (int pass = 0; pass < 2; ++pass) {  // the second pass wraps persistent tensors
    for (size_t k = n; k-- > 0;) {
      for (Use& u : uses[k]) {
        if (pass == 1 || following[u.tensor] >= 0) u.read_next = following[u.tensor] == 1;
        following[u.tensor] = u.reads ? 1 : 0;
      }
    }
    for (size_t t = 0; t < trace.tensors.size(); ++t) {
      if (!trace.tensors[t].persistent) following[t] = -1;
    }
  }
  const double pcie_bytes_per_us = pcie_gbps * 1e3, ssd_bytes_per_us = ssd_gbps * 1e3;
  const double device = static_cast<double>(device_bytes);
  const double host = static_cast<double>(host_bytes);
  // best[j]: the largest bound for kernels [0, j).
  std::vector<double> best(n + 1, 0);
  std::vector<uint32_t> seen(trace.tensors.size(), 0), written(trace.tensors.size(), 0);
  std::vector<uint8_t> pending(trace.tensors.size(), 0);  // written in W, read after it
  uint32_t stamp = 0;
  for (size_t i = 0; i < n; ++i) {
    ++stamp;
    double compute = 0, data = 0, produced = 0;
    for (size_t j = i; j < n; ++j) {
      compute += trace.kernels[j].us;
      for (const Use& u : uses[j]) {
        const double bytes = static_cast<double>(trace.tensors[u.tensor].bytes);
        if (seen[u.tensor] != stamp) {
          seen[u.tensor] = stamp;
          const bool has_data =
              trace.tensors[u.tensor].persistent || first_use[u.tensor] < static_cast<int64_t>(i);
          if (u.reads && has_data) data += bytes;
        }
        if (u.writes && written[u.tensor] != stamp) {
          written[u.tensor] = stamp;
          pending[u.tensor] = 0;
        }
        if (written[u.tensor] != stamp) continue;
        const uint8_t now_pending = u.read_next ? 1 : 0;
        if (now_pending != pending[u.tensor]) {
          produced += now_pending ? bytes : -bytes;
          pending[u.tensor] = now_pending;
        }
      }
      const double window = std::max({compute, (data - device) / pcie_bytes_per_us,
                                      (produced - device) / pcie_bytes_per_us,
                                      (data - device - host) / ssd_bytes_per_us});
      best[j + 1] = std::max(best[j + 1], best[i] + window);
    }
  }
  return best[n];
}

}  // namespace memvirt::policy

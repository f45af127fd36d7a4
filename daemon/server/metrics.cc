#include "daemon/server/metrics.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/server/accept_backoff.h"
#include "glog/logging.h"

namespace memvirt::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

class Families {
 public:
  MetricFamily& Get(const std::string& name, const std::string& help, MetricType type) {
    for (MetricFamily& f : families_) {
      if (f.name == name) return f;
    }
    families_.push_back({name, help, type, {}});
    return families_.back();
  }
  void Add(const std::string& name, const std::string& help, MetricType type,
           std::vector<ClientMetric::Label> labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    if (type == MetricType::Counter) {
      m.counter.value = value;
    } else {
      m.gauge.value = value;
    }
    Get(name, help, type).metric.push_back(std::move(m));
  }
  void AddHistogram(const std::string& name, const std::string& help,
                    std::vector<ClientMetric::Label> labels, const LatencyHistogram& h) {
    ClientMetric m;
    m.label = std::move(labels);
    m.histogram.sample_count = h.samples;
    m.histogram.sample_sum = h.sum_seconds;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      cumulative += h.counts[i];
      m.histogram.bucket.push_back({cumulative, LatencyHistogram::kBounds[i]});
    }
    m.histogram.bucket.push_back({h.samples, std::numeric_limits<double>::infinity()});
    Get(name, help, MetricType::Histogram).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
};

constexpr MetricType kGauge = MetricType::Gauge;
constexpr MetricType kCounter = MetricType::Counter;
const PeerCredentials kSelf{.pid = 0, .uid = 0, .gid = 0, .groups = {}};

}  // namespace

std::vector<MetricFamily> NodeCollector::Collect() const {
  absl::StatusOr<NodeSnapshot> snap = node_->GetStatus(kSelf);
  if (!snap.ok()) return {};
  Families f;
  f.Add("memvirt_build_info", "memvirtd build information.", kGauge, {{"version", MEMVIRT_VERSION}},
        1);
  for (const GpuSnapshot& g : snap->gpus) {
    const std::vector<ClientMetric::Label> gpu = {{"gpu", g.gpu_uuid}};
    f.Add("memvirt_device_memory_bytes", "Total memory of the GPU.", kGauge, gpu,
          static_cast<double>(g.device_memory_bytes));
    f.Add("memvirt_reserve_bytes", "GPU memory kept out of every budget.", kGauge, gpu,
          static_cast<double>(g.reserve_bytes));
    f.Add("memvirt_budget_sum_bytes", "Sum of budgets held on the GPU.", kGauge, gpu,
          static_cast<double>(g.budget_sum_bytes));
    f.Add("memvirt_gpu_draining", "1 while the GPU is drained.", kGauge, gpu, g.draining ? 1 : 0);
    f.Add("memvirt_clients", "Registered processes on the GPU.", kGauge, gpu, g.clients);
  }
  for (const ClientSnapshot& c : snap->clients) {
    const std::string pid = absl::StrCat(c.creds.pid);
    for (const ClientGpuSnapshot& g : c.gpus) {
      const std::vector<ClientMetric::Label> l = {{"gpu", g.gpu_uuid}, {"pid", pid}};
      f.Add("memvirt_budget_bytes", "HBM budget granted to the process.", kGauge, l,
            static_cast<double>(g.budget_bytes));
      f.Add("memvirt_resident_bytes", "HBM the process keeps resident.", kGauge, l,
            static_cast<double>(g.usage.resident_bytes));
      f.Add("memvirt_host_bytes", "Bytes of the process in the host tier.", kGauge, l,
            static_cast<double>(g.usage.host_bytes));
      f.Add("memvirt_nvme_bytes", "Bytes of the process in the NVMe tier.", kGauge, l,
            static_cast<double>(g.usage.nvme_bytes));
    }
  }
  f.Add("memvirt_host_capacity_bytes", "Host tier capacity (0 = unlimited).", kGauge, {},
        static_cast<double>(snap->host_capacity_bytes));
  f.Add("memvirt_host_used_bytes", "Host tier bytes used by all processes.", kGauge, {},
        static_cast<double>(snap->host_used_bytes));
  const NodeTotals& t = snap->totals;
  const char* kPaged = "memvirt_paged_bytes_total";
  const char* kPagedHelp = "Bytes moved between tiers since the daemon started.";
  f.Add(kPaged, kPagedHelp, kCounter, {{"direction", "in"}, {"tier", "host"}},
        static_cast<double>(t.paged_in_bytes));
  f.Add(kPaged, kPagedHelp, kCounter, {{"direction", "out"}, {"tier", "host"}},
        static_cast<double>(t.paged_out_bytes));
  f.Add(kPaged, kPagedHelp, kCounter, {{"direction", "in"}, {"tier", "nvme"}},
        static_cast<double>(t.nvme_read_bytes));
  f.Add(kPaged, kPagedHelp, kCounter, {{"direction", "out"}, {"tier", "nvme"}},
        static_cast<double>(t.nvme_write_bytes));
  f.Add("memvirt_directives_total", "Directives sent to clients.", kCounter, {},
        static_cast<double>(t.directives_sent));
  f.Add("memvirt_shrinks_overdue_total", "Shrinks not acknowledged by their deadline.", kCounter,
        {}, static_cast<double>(t.shrinks_overdue));
  f.Add("memvirt_clients_registered_total", "Client registrations.", kCounter, {},
        static_cast<double>(t.clients_registered));
  f.Add("memvirt_clients_reclaimed_total", "Clients whose resources were reclaimed.", kCounter, {},
        static_cast<double>(t.clients_reclaimed));
  f.Add("memvirt_implausible_reports_total",
        "Usage reports whose paging counters went back or grew implausibly fast (not counted).",
        kCounter, {}, static_cast<double>(t.implausible_reports));
  f.Add("memvirt_accept_backoffs_total",
        "accept() failures for lack of descriptors or memory, each followed by a backoff.",
        kCounter, {}, static_cast<double>(AcceptBackoff::TotalBackoffs()));
  if (nvme_.store != nullptr) {
    const nvme::SwapStoreStats s = nvme_.store->stats();
    f.Add("memvirt_nvme_swap_capacity_bytes", "Swap space of the NVMe tier.", kGauge, {},
          static_cast<double>(s.capacity_bytes));
    f.Add("memvirt_nvme_swap_used_bytes", "Swap space in use.", kGauge, {},
          static_cast<double>(s.used_bytes));
    f.Add("memvirt_nvme_swap_free_bytes", "Swap space free.", kGauge, {},
          static_cast<double>(s.capacity_bytes - std::min(s.used_bytes, s.capacity_bytes)));
  }
  if (nvme_.service != nullptr) {
    const TierStats s = nvme_.service->stats();
    f.Add("memvirt_nvme_connections", "Open tier connections.", kGauge, {},
          static_cast<double>(s.connections));
    const char* kErrors = "memvirt_nvme_io_errors_total";
    const char* kErrorsHelp = "Tier requests failed by an I/O error or a checksum mismatch.";
    f.Add(kErrors, kErrorsHelp, kCounter, {{"op", "store"}},
          static_cast<double>(s.store_io_errors));
    f.Add(kErrors, kErrorsHelp, kCounter, {{"op", "load"}}, static_cast<double>(s.load_io_errors));
    const char* kLatency = "memvirt_nvme_request_seconds";
    const char* kLatencyHelp = "Time the daemon took to serve a tier store or load.";
    f.AddHistogram(kLatency, kLatencyHelp, {{"op", "store"}}, s.store_latency);
    f.AddHistogram(kLatency, kLatencyHelp, {{"op", "load"}}, s.load_latency);
  }
  return f.Take();
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(const std::string& listen,
                                                                      const NodeState* node,
                                                                      NvmeMetricsSources nvme) {
  auto endpoint = std::make_unique<MetricsEndpoint>();
  endpoint->collector = std::make_shared<NodeCollector>(node, nvme);
  try {  // prometheus-cpp reports bind failures by throwing; nothing escapes this function.
    // Note [metrics endpoint].
    endpoint->exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", listen, "num_threads", absl::StrCat(kMetricsWorkers),
        "request_timeout_ms", absl::StrCat(kMetricsRequestTimeoutMs)});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics endpoint ", listen, ": ", e.what()));
  }
  endpoint->exposer->RegisterCollectable(endpoint->collector);
  const std::vector<int> ports = endpoint->exposer->GetListeningPorts();
  endpoint->port = ports.empty() ? 0 : ports.front();
  return endpoint;
}

}  // namespace memvirt::daemon

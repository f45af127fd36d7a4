// Prometheus metrics of the node, computed from a NodeState snapshot at scrape time, and the
// HTTP endpoint serving them (prometheus-cpp's Exposer over civetweb).
//
// Names (conventional units, bounded labels):
//   memvirt_build_info{version}                                gauge, always 1
//   memvirt_device_memory_bytes{gpu}, memvirt_reserve_bytes{gpu}, memvirt_budget_sum_bytes{gpu},
//   memvirt_gpu_draining{gpu}, memvirt_clients{gpu}             gauges
//   memvirt_budget_bytes{gpu,pid}, memvirt_resident_bytes{gpu,pid},
//   memvirt_host_bytes{gpu,pid}, memvirt_nvme_bytes{gpu,pid}    gauges
//   memvirt_host_capacity_bytes, memvirt_host_used_bytes         gauges
//   memvirt_paged_bytes_total{direction="in|out",tier="host|nvme"}  counter (node lifetime)
//   memvirt_directives_total, memvirt_shrinks_overdue_total,
//   memvirt_clients_registered_total, memvirt_clients_reclaimed_total,
//   memvirt_implausible_reports_total,
//   memvirt_accept_backoffs_total (Note [accept backoff])        counters
// With the NVMe tier:
//   memvirt_nvme_swap_capacity_bytes, memvirt_nvme_swap_used_bytes,
//   memvirt_nvme_swap_free_bytes, memvirt_nvme_connections      gauges
//   memvirt_nvme_io_errors_total{op="store|load"}               counter (EIO, CRC mismatch)
//   memvirt_nvme_request_seconds{op="store|load"}               histogram
//
// Note [metrics endpoint]
// civetweb gives every TCP connection a worker until its request arrives or
// request_timeout_ms passes, so one idle connection used to block the single worker (and every
// scrape) for 30 s. The endpoint runs kMetricsWorkers workers with a kMetricsRequestTimeoutMs
// timeout. It has no authentication and shows pids, so it is off unless --metrics_listen is
// set; bind it to loopback or a network only the monitoring system reaches.
//
// Thread safety: Collect() may run on any civetweb thread; NodeState is thread-safe.
#ifndef MEMVIRT_DAEMON_SERVER_METRICS_H_
#define MEMVIRT_DAEMON_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/node_state.h"
#include "daemon/server/tier_service.h"
#include "memvirt/nvme/swap_store.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace memvirt::daemon {

inline constexpr int kMetricsWorkers = 4;
inline constexpr int kMetricsRequestTimeoutMs = 2000;

// The NVMe tier's parts the metrics read (not owned; null without the tier).
struct NvmeMetricsSources {
  const TierService* service = nullptr;
  const nvme::SwapStore* store = nullptr;
};

class NodeCollector final : public prometheus::Collectable {
 public:
  // Not owned; all MUST outlive the collector's endpoint.
  NodeCollector(const NodeState* node, NvmeMetricsSources nvme) : node_(node), nvme_(nvme) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const NodeState* const node_;
  const NvmeMetricsSources nvme_;
};

// Serves /metrics on `listen` ("host:port"; port 0 picks a free one). The server lives as long
// as the returned object.
struct MetricsEndpoint {
  std::shared_ptr<NodeCollector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
};
absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(const std::string& listen,
                                                                      const NodeState* node,
                                                                      NvmeMetricsSources nvme = {});

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_METRICS_H_

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
//   memvirt_clients_registered_total, memvirt_clients_reclaimed_total  counters
//
// Thread safety: Collect() may run on any civetweb thread; NodeState is thread-safe.
#ifndef MEMVIRT_DAEMON_SERVER_METRICS_H_
#define MEMVIRT_DAEMON_SERVER_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/node_state.h"
#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace memvirt::daemon {

class NodeCollector final : public prometheus::Collectable {
 public:
  explicit NodeCollector(const NodeState* node) : node_(node) {}  // Not owned.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const NodeState* const node_;
};

// Serves /metrics on `listen` ("host:port"; port 0 picks a free one). The server lives as long
// as the returned object.
struct MetricsEndpoint {
  std::shared_ptr<NodeCollector> collector;
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
};
absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartMetricsEndpoint(const std::string& listen,
                                                                      const NodeState* node);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_METRICS_H_

#include "daemon/server/proto_convert.h"

#include <string>

namespace memvirt::daemon {

void ToProto(const RegisterResult& r, uint32_t hint_interval_ms, v1::Registered* p) {
  protocol::Registered registered;
  registered.client_id = r.client_id;
  registered.pid = static_cast<uint32_t>(r.pid);
  registered.protocol_version = kProtocolVersion;
  registered.budgets = r.budgets;
  registered.host_budget_bytes = r.host_budget_bytes;
  registered.hint_interval_ms = hint_interval_ms;
  ToProto(registered, p);
}

void ToProto(const ClientSnapshot& c, v1::ClientStatus* p) {
  p->set_client_id(c.client_id);
  p->set_pid(static_cast<uint32_t>(c.creds.pid));
  p->set_uid(c.creds.uid);
  p->set_gid(c.creds.gid);
  p->set_process_name(c.process_name);
  p->set_host_budget_bytes(c.host_budget_bytes);
  p->set_connected_seconds(static_cast<uint64_t>(absl::ToInt64Seconds(c.connected_for)));
  p->set_iteration(c.iteration);
  for (const ClientGpuSnapshot& g : c.gpus) {
    v1::ClientGpuStatus* out = p->add_gpus();
    out->set_gpu_uuid(g.gpu_uuid);
    out->set_budget_bytes(g.budget_bytes);
    out->set_target_bytes(g.target_bytes);
    out->set_quota_bytes(g.quota_bytes);
    ToProto(g.usage, out->mutable_usage());
    out->set_page_in_bytes_per_second(g.page_in_bytes_per_second);
    out->set_page_out_bytes_per_second(g.page_out_bytes_per_second);
    out->set_shrink_overdue(g.shrink_overdue);
  }
}

void ToProto(const ClientSnapshot& c, v1::ClientDetail* p) {
  ToProto(c, p->mutable_status());
  p->set_hint_batches(c.hint_batches);
  p->set_alloc_hints(c.alloc_hints);
  p->set_live_allocations(c.live_allocations);
  p->set_live_allocation_bytes(c.live_allocation_bytes);
  p->set_directives_sent(c.directives_sent);
  p->set_directives_acked(c.directives_acked);
}

void ToProto(const NodeSnapshot& s, v1::StatusResponse* p) {
  p->set_daemon_version(MEMVIRT_VERSION);
  p->set_protocol_version(kProtocolVersion);
  p->set_host_capacity_bytes(s.host_capacity_bytes);
  p->set_host_used_bytes(s.host_used_bytes);
  p->set_uptime_seconds(static_cast<uint64_t>(absl::ToInt64Seconds(s.uptime)));
  for (const GpuSnapshot& g : s.gpus) {
    v1::GpuStatus* out = p->add_gpus();
    out->set_gpu_uuid(g.gpu_uuid);
    out->set_device_memory_bytes(g.device_memory_bytes);
    out->set_reserve_bytes(g.reserve_bytes);
    out->set_budget_sum_bytes(g.budget_sum_bytes);
    out->set_resident_sum_bytes(g.resident_sum_bytes);
    out->set_draining(g.draining);
    out->set_clients(g.clients);
  }
  for (const ClientSnapshot& c : s.clients) ToProto(c, p->add_clients());
}

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace memvirt::daemon

#include "daemon/server/proto_convert.h"

#include <string>

namespace memvirt::daemon {

GpuUsage FromProto(const v1::GpuUsage& p) {
  return {.gpu_uuid = p.gpu_uuid(),
          .resident_bytes = p.resident_bytes(),
          .host_bytes = p.host_bytes(),
          .nvme_bytes = p.nvme_bytes(),
          .paged_in_bytes = p.paged_in_bytes(),
          .paged_out_bytes = p.paged_out_bytes(),
          .nvme_read_bytes = p.nvme_read_bytes(),
          .nvme_write_bytes = p.nvme_write_bytes()};
}

namespace {

std::vector<GpuClaim> ClaimsFromProto(const google::protobuf::RepeatedPtrField<v1::GpuClaim>& p) {
  std::vector<GpuClaim> claims;
  claims.reserve(p.size());
  for (const v1::GpuClaim& g : p) {
    claims.push_back({.gpu_uuid = g.gpu_uuid(),
                      .device_memory_bytes = g.device_memory_bytes(),
                      .demand_bytes = g.demand_bytes(),
                      .min_bytes = g.min_bytes()});
  }
  return claims;
}

}  // namespace

std::vector<GpuClaim> FromProto(const v1::AddGpusRequest& p) { return ClaimsFromProto(p.gpus()); }

Registration FromProto(const v1::RegisterRequest& p) {
  Registration r;
  r.protocol_version = p.protocol_version();
  r.process_name = p.process_name();
  r.host_demand_bytes = p.host_demand_bytes();
  r.gpus = ClaimsFromProto(p.gpus());
  for (const v1::GpuUsage& u : p.usage()) r.usage.push_back(FromProto(u));
  return r;
}

HintBatch FromProto(const v1::HintBatch& p) {
  HintBatch b;
  b.iteration = p.iteration();
  b.allocs.reserve(p.allocs_size());
  for (const v1::AllocHint& a : p.allocs()) {
    b.allocs.push_back({a.alloc_id(), a.gpu_uuid(), a.bytes(), a.freed()});
  }
  b.accesses.reserve(p.accesses_size());
  for (const v1::AccessSummary& a : p.accesses()) {
    b.accesses.push_back({a.alloc_id(), a.accesses(), a.first_launch(), a.last_launch()});
  }
  for (const v1::GpuUsage& u : p.usage()) b.usage.push_back(FromProto(u));
  return b;
}

DirectiveAck FromProto(const v1::DirectiveAck& p) {
  DirectiveAck a;
  a.directive_id = p.directive_id();
  a.complied = p.complied();
  if (p.has_usage()) a.usage = FromProto(p.usage());
  return a;
}

void ToProto(const GpuUsage& u, v1::GpuUsage* p) {
  p->set_gpu_uuid(u.gpu_uuid);
  p->set_resident_bytes(u.resident_bytes);
  p->set_host_bytes(u.host_bytes);
  p->set_nvme_bytes(u.nvme_bytes);
  p->set_paged_in_bytes(u.paged_in_bytes);
  p->set_paged_out_bytes(u.paged_out_bytes);
  p->set_nvme_read_bytes(u.nvme_read_bytes);
  p->set_nvme_write_bytes(u.nvme_write_bytes);
}

void ToProto(const GpuBudget& b, v1::GpuBudget* p) {
  p->set_gpu_uuid(b.gpu_uuid);
  p->set_budget_bytes(b.budget_bytes);
  p->set_pending(b.pending);
}

void ToProto(const RegisterResult& r, uint32_t hint_interval_ms, v1::Registered* p) {
  p->set_client_id(r.client_id);
  p->set_pid(static_cast<uint32_t>(r.pid));
  p->set_protocol_version(kProtocolVersion);
  p->set_host_budget_bytes(r.host_budget_bytes);
  p->set_hint_interval_ms(hint_interval_ms);
  for (const GpuBudget& b : r.budgets) ToProto(b, p->add_budgets());
}

void ToProto(const Directive& d, v1::Directive* p) {
  p->set_directive_id(d.id);
  switch (d.kind) {
    case Directive::Kind::kBudget:
      p->set_kind(v1::Directive::BUDGET);
      break;
    case Directive::Kind::kEvict:
      p->set_kind(v1::Directive::EVICT);
      break;
    case Directive::Kind::kDemote:
      p->set_kind(v1::Directive::DEMOTE);
      break;
    case Directive::Kind::kHostBudget:
      p->set_kind(v1::Directive::HOST_BUDGET);
      break;
  }
  p->set_gpu_uuid(d.gpu_uuid);
  p->set_budget_bytes(d.budget_bytes);
  p->set_bytes(d.bytes);
  p->set_deadline_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(d.deadline)));
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
  p->set_access_hints(c.access_hints);
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

#include "memvirt/protocol/convert.h"

namespace memvirt::protocol {

void ToProto(const GpuClaim& g, v1::GpuClaim* p) {
  p->set_gpu_uuid(g.gpu_uuid);
  p->set_device_memory_bytes(g.device_memory_bytes);
  p->set_demand_bytes(g.demand_bytes);
  p->set_min_bytes(g.min_bytes);
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

void ToProto(const Registration& r, v1::RegisterRequest* p) {
  p->set_protocol_version(r.protocol_version);
  p->set_process_name(r.process_name);
  p->set_host_demand_bytes(r.host_demand_bytes);
  for (const GpuClaim& g : r.gpus) ToProto(g, p->add_gpus());
  for (const GpuUsage& u : r.usage) ToProto(u, p->add_usage());
}

void ToProto(const std::vector<GpuClaim>& gpus, v1::AddGpusRequest* p) {
  for (const GpuClaim& g : gpus) ToProto(g, p->add_gpus());
}

void ToProto(const HintBatch& b, v1::HintBatch* p) {
  p->set_iteration(b.iteration);
  for (const AllocHint& a : b.allocs) {
    v1::AllocHint* out = p->add_allocs();
    out->set_alloc_id(a.alloc_id);
    out->set_gpu_uuid(a.gpu_uuid);
    out->set_bytes(a.bytes);
    out->set_freed(a.freed);
  }
  for (const GpuUsage& u : b.usage) ToProto(u, p->add_usage());
}

void ToProto(const DirectiveAck& a, v1::DirectiveAck* p) {
  p->set_directive_id(a.directive_id);
  p->set_complied(a.complied);
  if (a.usage.has_value()) ToProto(*a.usage, p->mutable_usage());
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
  p->set_deadline_ms(static_cast<uint32_t>(d.deadline.count()));
}

void ToProto(const GpuBudget& b, v1::GpuBudget* p) {
  p->set_gpu_uuid(b.gpu_uuid);
  p->set_budget_bytes(b.budget_bytes);
  p->set_pending(b.pending);
}

void ToProto(const Registered& r, v1::Registered* p) {
  p->set_client_id(r.client_id);
  p->set_pid(r.pid);
  p->set_protocol_version(r.protocol_version);
  p->set_host_budget_bytes(r.host_budget_bytes);
  p->set_hint_interval_ms(r.hint_interval_ms);
  for (const GpuBudget& b : r.budgets) ToProto(b, p->add_budgets());
}

void ToProto(const GpusAdded& a, v1::GpusAdded* p) {
  for (const GpuBudget& b : a.budgets) ToProto(b, p->add_budgets());
  p->set_error(a.error);
}

GpuClaim FromProto(const v1::GpuClaim& p) {
  return {.gpu_uuid = p.gpu_uuid(),
          .device_memory_bytes = p.device_memory_bytes(),
          .demand_bytes = p.demand_bytes(),
          .min_bytes = p.min_bytes()};
}

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

Registration FromProto(const v1::RegisterRequest& p) {
  Registration r;
  r.protocol_version = p.protocol_version();
  r.process_name = p.process_name();
  r.host_demand_bytes = p.host_demand_bytes();
  r.gpus.reserve(p.gpus_size());
  for (const v1::GpuClaim& g : p.gpus()) r.gpus.push_back(FromProto(g));
  for (const v1::GpuUsage& u : p.usage()) r.usage.push_back(FromProto(u));
  return r;
}

std::vector<GpuClaim> FromProto(const v1::AddGpusRequest& p) {
  std::vector<GpuClaim> claims;
  claims.reserve(p.gpus_size());
  for (const v1::GpuClaim& g : p.gpus()) claims.push_back(FromProto(g));
  return claims;
}

HintBatch FromProto(const v1::HintBatch& p) {
  HintBatch b;
  b.iteration = p.iteration();
  b.allocs.reserve(p.allocs_size());
  for (const v1::AllocHint& a : p.allocs()) {
    b.allocs.push_back({a.alloc_id(), a.gpu_uuid(), a.bytes(), a.freed()});
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

Directive FromProto(const v1::Directive& p) {
  Directive d;
  d.id = p.directive_id();
  switch (p.kind()) {
    case v1::Directive::EVICT:
      d.kind = Directive::Kind::kEvict;
      break;
    case v1::Directive::DEMOTE:
      d.kind = Directive::Kind::kDemote;
      break;
    case v1::Directive::HOST_BUDGET:
      d.kind = Directive::Kind::kHostBudget;
      break;
    default:
      d.kind = Directive::Kind::kBudget;
  }
  d.gpu_uuid = p.gpu_uuid();
  d.budget_bytes = p.budget_bytes();
  d.bytes = p.bytes();
  d.deadline = std::chrono::milliseconds(p.deadline_ms());
  return d;
}

GpuBudget FromProto(const v1::GpuBudget& p) {
  return {.gpu_uuid = p.gpu_uuid(), .budget_bytes = p.budget_bytes(), .pending = p.pending()};
}

Registered FromProto(const v1::Registered& p) {
  Registered r;
  r.client_id = p.client_id();
  r.pid = p.pid();
  r.protocol_version = p.protocol_version();
  r.host_budget_bytes = p.host_budget_bytes();
  r.hint_interval_ms = p.hint_interval_ms();
  for (const v1::GpuBudget& b : p.budgets()) r.budgets.push_back(FromProto(b));
  return r;
}

GpusAdded FromProto(const v1::GpusAdded& p) {
  GpusAdded a;
  for (const v1::GpuBudget& b : p.budgets()) a.budgets.push_back(FromProto(b));
  a.error = p.error();
  return a;
}

}  // namespace memvirt::protocol

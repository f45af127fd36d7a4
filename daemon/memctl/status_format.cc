#include "daemon/memctl/status_format.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/core/size_parse.h"

namespace memvirt::memctl {
namespace {

using daemon::FormatBytes;

std::string Rate(double bytes_per_second) {
  return absl::StrCat(FormatBytes(static_cast<uint64_t>(bytes_per_second)), "/s");
}

std::string ShortUuid(const std::string& uuid) {
  return uuid.size() <= 20 ? uuid : uuid.substr(0, 20) + "~";
}

void AppendClientJson(const v1::ClientStatus& c, std::string* out) {
  absl::StrAppend(out, "{\"pid\":", c.pid(), ",\"uid\":", c.uid(), ",\"gid\":", c.gid(),
                  ",\"name\":", JsonQuote(c.process_name()), ",\"client_id\":", c.client_id(),
                  ",\"host_budget_bytes\":", c.host_budget_bytes(),
                  ",\"iteration\":", c.iteration(),
                  ",\"connected_seconds\":", c.connected_seconds(), ",\"gpus\":[");
  bool first = true;
  for (const v1::ClientGpuStatus& g : c.gpus()) {
    if (!first) out->push_back(',');
    first = false;
    const v1::GpuUsage& u = g.usage();
    absl::StrAppend(
        out, "{\"uuid\":", JsonQuote(g.gpu_uuid()), ",\"budget_bytes\":", g.budget_bytes(),
        ",\"target_bytes\":", g.target_bytes(), ",\"quota_bytes\":", g.quota_bytes(),
        ",\"resident_bytes\":", u.resident_bytes(), ",\"host_bytes\":", u.host_bytes(),
        ",\"nvme_bytes\":", u.nvme_bytes(), ",\"paged_in_bytes\":", u.paged_in_bytes(),
        ",\"paged_out_bytes\":", u.paged_out_bytes(), ",\"nvme_read_bytes\":", u.nvme_read_bytes(),
        ",\"nvme_write_bytes\":", u.nvme_write_bytes(),
        ",\"page_in_bytes_per_second\":", static_cast<uint64_t>(g.page_in_bytes_per_second()),
        ",\"page_out_bytes_per_second\":", static_cast<uint64_t>(g.page_out_bytes_per_second()),
        ",\"shrink_overdue\":", g.shrink_overdue() ? "true" : "false", "}");
  }
  out->append("]}");
}

}  // namespace

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (ch < 0x20) {
          out += absl::StrFormat("\\u%04x", ch);
        } else {
          out.push_back(static_cast<char>(ch));
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string FormatStatusJson(const v1::StatusResponse& s) {
  std::string out;
  absl::StrAppend(&out, "{\"version\":", kStatusJsonVersion,
                  ",\"daemon_version\":", JsonQuote(s.daemon_version()),
                  ",\"protocol_version\":", s.protocol_version(),
                  ",\"uptime_seconds\":", s.uptime_seconds(),
                  ",\"host\":{\"capacity_bytes\":", s.host_capacity_bytes(),
                  ",\"used_bytes\":", s.host_used_bytes(), "},\"gpus\":[");
  bool first = true;
  for (const v1::GpuStatus& g : s.gpus()) {
    if (!first) out.push_back(',');
    first = false;
    absl::StrAppend(
        &out, "{\"uuid\":", JsonQuote(g.gpu_uuid()),
        ",\"device_memory_bytes\":", g.device_memory_bytes(),
        ",\"reserve_bytes\":", g.reserve_bytes(), ",\"budget_sum_bytes\":", g.budget_sum_bytes(),
        ",\"resident_sum_bytes\":", g.resident_sum_bytes(),
        ",\"draining\":", g.draining() ? "true" : "false", ",\"clients\":", g.clients(), "}");
  }
  out.append("],\"processes\":[");
  first = true;
  for (const v1::ClientStatus& c : s.clients()) {
    if (!first) out.push_back(',');
    first = false;
    AppendClientJson(c, &out);
  }
  out.append("]}\n");
  return out;
}

std::string FormatStatusTable(const v1::StatusResponse& s, bool headers) {
  std::string out;
  if (headers) {
    absl::StrAppend(
        &out, "memvirtd ", s.daemon_version(), "  protocol v1.", s.protocol_version(), "  up ",
        s.uptime_seconds(), "s  host tier ", FormatBytes(s.host_used_bytes()), " used of ",
        s.host_capacity_bytes() == 0 ? "unlimited" : FormatBytes(s.host_capacity_bytes()), "\n");
    absl::StrAppend(&out, absl::StrFormat("%-21s %10s %10s %10s %10s %7s %s\n", "GPU", "MEMORY",
                                          "RESERVE", "BUDGETS", "RESIDENT", "PROCS", "STATE"));
  }
  for (const v1::GpuStatus& g : s.gpus()) {
    absl::StrAppend(
        &out,
        absl::StrFormat("%-21s %10s %10s %10s %10s %7u %s\n", ShortUuid(g.gpu_uuid()),
                        FormatBytes(g.device_memory_bytes()), FormatBytes(g.reserve_bytes()),
                        FormatBytes(g.budget_sum_bytes()), FormatBytes(g.resident_sum_bytes()),
                        g.clients(), g.draining() ? "draining" : "active"));
  }
  if (headers) {
    absl::StrAppend(
        &out, "\n",
        absl::StrFormat("%-8s %-15s %-21s %10s %10s %10s %10s %11s %11s\n", "PID", "NAME", "GPU",
                        "RESIDENT", "HOST", "NVME", "BUDGET", "PAGE-IN", "PAGE-OUT"));
  }
  for (const v1::ClientStatus& c : s.clients()) {
    for (const v1::ClientGpuStatus& g : c.gpus()) {
      std::string budget = FormatBytes(g.budget_bytes());
      if (g.shrink_overdue()) budget += "!";
      absl::StrAppend(
          &out, absl::StrFormat(
                    "%-8u %-15s %-21s %10s %10s %10s %10s %11s %11s\n", c.pid(),
                    c.process_name().substr(0, 15), ShortUuid(g.gpu_uuid()),
                    FormatBytes(g.usage().resident_bytes()), FormatBytes(g.usage().host_bytes()),
                    FormatBytes(g.usage().nvme_bytes()), budget, Rate(g.page_in_bytes_per_second()),
                    Rate(g.page_out_bytes_per_second())));
    }
  }
  if (headers && s.clients_size() == 0) out += "(no registered processes visible to you)\n";
  return out;
}

std::string FormatClientJson(const v1::ClientDetail& d) {
  std::string out;
  absl::StrAppend(&out, "{\"version\":", kStatusJsonVersion, ",\"process\":");
  AppendClientJson(d.status(), &out);
  absl::StrAppend(&out, ",\"hint_batches\":", d.hint_batches(),
                  ",\"alloc_hints\":", d.alloc_hints(),
                  ",\"live_allocations\":", d.live_allocations(),
                  ",\"live_allocation_bytes\":", d.live_allocation_bytes(),
                  ",\"directives_sent\":", d.directives_sent(),
                  ",\"directives_acked\":", d.directives_acked(), "}\n");
  return out;
}

std::string FormatClientText(const v1::ClientDetail& d) {
  const v1::ClientStatus& c = d.status();
  std::string out = absl::StrFormat(
      "pid %u (%s) uid %u gid %u, client %u, connected %us, iteration %u\n"
      "hints: %u batches, %u alloc; live allocations %u (%s)\n"
      "directives: %u sent, %u acknowledged; host budget %s\n",
      c.pid(), c.process_name(), c.uid(), c.gid(), c.client_id(), c.connected_seconds(),
      c.iteration(), d.hint_batches(), d.alloc_hints(), d.live_allocations(),
      FormatBytes(d.live_allocation_bytes()), d.directives_sent(), d.directives_acked(),
      c.host_budget_bytes() == 0 ? "unlimited" : FormatBytes(c.host_budget_bytes()));
  for (const v1::ClientGpuStatus& g : c.gpus()) {
    absl::StrAppend(&out, "  ", g.gpu_uuid(), ": resident ",
                    FormatBytes(g.usage().resident_bytes()), ", budget ",
                    FormatBytes(g.budget_bytes()), " (target ", FormatBytes(g.target_bytes()),
                    ", quota ", g.quota_bytes() == 0 ? "none" : FormatBytes(g.quota_bytes()), ")",
                    g.shrink_overdue() ? ", SHRINK OVERDUE" : "", "\n");
  }
  return out;
}

}  // namespace memvirt::memctl

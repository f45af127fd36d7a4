// memvirt-sim: trace-driven paging simulator (see docs/policy.md).
//
//   memvirt-sim --trace FILE.jsonl[.gz] --policy lru|lifetime|belady
//               --device-memory BYTES --host-memory BYTES --pcie-gbps X
//               --ssd-gbps Y [--chunk 2M] [--iterations N] --json
//
// Prints one JSON object on stdout. Exit status: 0 success, 1 simulation or
// trace error, 2 bad command line.

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "memvirt/policy/shim_layout.h"
#include "memvirt/policy/simulator.h"
#include "memvirt/trace/memtrace.h"
#include "tools/cli_values.h"

namespace {

constexpr char kUsage[] =
    "usage: memvirt-sim --trace FILE.jsonl[.gz] --policy lru|lifetime|belady|uvm\n"
    "                   --device-memory BYTES --host-memory BYTES --pcie-gbps X --ssd-gbps Y\n"
    "                   [--chunk BYTES (default 2M)] [--small-granularity BYTES (default 4K)]\n"
    "                   [--iterations N (default 2)] [--no-prefetch] [--belady-lookahead]\n"
    "                   [--lookahead-slack X] [--evict-ahead-slack X] [--plan-fraction X]\n"
    "                   [--no-residency-plan] [--uvm-fault-latency-us X (default 5)]\n"
    "                   [--uvm-fault-batch PAGES (default 256)] [--uvm-migrate-reborn]\n"
    "                   [--shim-layout] [--shim-mechanism] [--shim-remap-us X (default 0)]\n"
    "                   --json\n"
    "belady is demand-only (the traffic lower bound) unless --belady-lookahead.\n"
    "--shim-layout: page the trace as the shim does (slabs, whole chunks, read-write).\n"
    "--shim-mechanism: also time it as the shim pages (implies --shim-layout).\n"
    "BYTES: K/M/G/T and Ki/Mi/Gi/Ti are binary, KB/MB/GB/TB decimal. GB/s are decimal.\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "memvirt-sim: %s\n%s", error.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using memvirt::policy::ParseByteSize;
  std::map<std::string, std::string> values;
  bool json = false;
  bool no_prefetch = false;
  bool belady_lookahead = false;
  bool no_residency_plan = false;
  bool shim_layout = false;
  bool uvm_migrate_reborn = false;
  bool shim_mechanism = false;
  static const char* kValueFlags[] = {"--trace",
                                      "--policy",
                                      "--device-memory",
                                      "--host-memory",
                                      "--pcie-gbps",
                                      "--ssd-gbps",
                                      "--chunk",
                                      "--iterations",
                                      "--small-granularity",
                                      "--lookahead-slack",
                                      "--plan-fraction",
                                      "--evict-ahead-slack",
                                      "--uvm-fault-latency-us",
                                      "--uvm-fault-batch",
                                      "--shim-remap-us"};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const std::pair<const char*, bool*> switches[] = {{"--json", &json},
                                                      {"--no-prefetch", &no_prefetch},
                                                      {"--belady-lookahead", &belady_lookahead},
                                                      {"--no-residency-plan", &no_residency_plan},
                                                      {"--uvm-migrate-reborn", &uvm_migrate_reborn},
                                                      {"--shim-layout", &shim_layout},
                                                      {"--shim-mechanism", &shim_mechanism}};
    bool is_switch = false;
    for (const auto& [flag, on] : switches) {
      if (arg == flag) *on = is_switch = true;
    }
    if (is_switch) continue;
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    bool known = false;
    for (const char* f : kValueFlags) known |= name == f;
    if (!known) return Usage("unknown flag '" + arg + "'");
    if (!has_value) {
      if (i + 1 >= argc) return Usage("flag " + name + " needs a value");
      value = argv[++i];
    }
    if (values.count(name)) return Usage("flag " + name + " given twice");
    values[name] = value;
  }
  if (!json) return Usage("--json is required (JSON is the only output format)");
  for (const char* required :
       {"--trace", "--policy", "--device-memory", "--host-memory", "--pcie-gbps", "--ssd-gbps"}) {
    if (!values.count(required)) return Usage(std::string("missing ") + required);
  }
  memvirt::policy::SimConfig config;
  config.prefetch = !no_prefetch;
  config.belady_lookahead = belady_lookahead;
  config.plan_residency = !no_residency_plan;
  config.uvm_migrate_reborn = uvm_migrate_reborn;
  config.shim_mechanism = shim_mechanism;
  shim_layout |= shim_mechanism;
  auto policy = memvirt::policy::ParsePolicyKind(values["--policy"]);
  if (!policy.ok()) return Usage(std::string(policy.status().message()));
  config.policy = *policy;
  auto device = ParseByteSize(values["--device-memory"]);
  if (!device.ok() || *device == 0) return Usage("--device-memory: bad or zero size");
  config.device_bytes = *device;
  auto host = ParseByteSize(values["--host-memory"]);
  if (!host.ok()) return Usage("--host-memory: " + std::string(host.status().message()));
  config.host_bytes = *host;
  auto pcie = memvirt::policy::ParsePositiveNumber(values["--pcie-gbps"]);
  if (!pcie.ok()) return Usage("--pcie-gbps: " + std::string(pcie.status().message()));
  config.pcie_gbps = *pcie;
  auto ssd = memvirt::policy::ParsePositiveNumber(values["--ssd-gbps"]);
  if (!ssd.ok()) return Usage("--ssd-gbps: " + std::string(ssd.status().message()));
  config.ssd_gbps = *ssd;
  if (values.count("--chunk")) {
    auto chunk = ParseByteSize(values["--chunk"]);
    if (!chunk.ok() || *chunk == 0) return Usage("--chunk: bad or zero size");
    config.chunk_bytes = *chunk;
  }
  if (values.count("--small-granularity")) {
    auto g = ParseByteSize(values["--small-granularity"]);
    if (!g.ok() || *g == 0) return Usage("--small-granularity: bad or zero size");
    config.small_granularity = *g;
  }
  if (values.count("--iterations")) {
    auto n = memvirt::policy::ParsePositiveInt(values["--iterations"]);
    if (!n.ok()) return Usage("--iterations: " + std::string(n.status().message()));
    config.iterations = *n;
  }
  if (values.count("--lookahead-slack")) {
    auto v = memvirt::policy::ParsePositiveNumber(values["--lookahead-slack"]);
    if (!v.ok()) return Usage("--lookahead-slack: " + std::string(v.status().message()));
    config.lookahead_slack = *v;
  }
  if (values.count("--evict-ahead-slack")) {
    auto v = memvirt::policy::ParsePositiveNumber(values["--evict-ahead-slack"]);
    if (!v.ok()) return Usage("--evict-ahead-slack: " + std::string(v.status().message()));
    config.evict_ahead_slack = *v;
  }
  if (values.count("--plan-fraction")) {
    auto v = memvirt::policy::ParsePositiveNumber(values["--plan-fraction"]);
    if (!v.ok() || *v > 1) return Usage("--plan-fraction: a number in (0, 1]");
    config.plan_fraction = *v;
  }
  if (values.count("--uvm-fault-latency-us")) {
    auto v = memvirt::policy::ParsePositiveNumber(values["--uvm-fault-latency-us"]);
    if (!v.ok()) return Usage("--uvm-fault-latency-us: " + std::string(v.status().message()));
    config.uvm_fault_latency_us = *v;
  }
  if (values.count("--uvm-fault-batch")) {
    auto n = memvirt::policy::ParsePositiveInt(values["--uvm-fault-batch"]);
    if (!n.ok()) return Usage("--uvm-fault-batch: " + std::string(n.status().message()));
    config.uvm_fault_batch_pages = static_cast<uint64_t>(*n);
  }
  if (values.count("--shim-remap-us")) {
    auto v = memvirt::policy::ParseNonNegativeNumber(values["--shim-remap-us"]);
    if (!v.ok()) return Usage("--shim-remap-us: " + std::string(v.status().message()));
    config.shim_remap_us = *v;
  }
  auto trace = memvirt::trace::ReadTrace(values["--trace"]);
  if (!trace.ok()) {
    std::fprintf(stderr, "memvirt-sim: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  if (shim_layout) *trace = memvirt::policy::ShimLayout(*trace);
  auto result = memvirt::policy::Simulate(*trace, config);
  if (!result.ok()) {
    std::fprintf(stderr, "memvirt-sim: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", memvirt::policy::FormatResultJson(*result, config).c_str());
  return 0;
}

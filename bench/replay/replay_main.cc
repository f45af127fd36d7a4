// memvirt-replay: replays a memtrace-v1 trace on a CUDA driver (the
// simulated GPU, a real one, or either under the memvirt shim).
//
//   memvirt-replay --trace FILE --scale S [--iterations N (2)] [--time-scale T (1)]
//       [--kernels PATH] [--corrupt-after K]
//       [--predict-device-memory BYTES [--predict-pcie-gbps X (15.754)]
//        [--predict-policy lru|lifetime|belady|uvm (lifetime)] [--predict-host-memory BYTES (1T)]
//        [--predict-ssd-gbps Y (3.2)] [--predict-layout tensor|shim|shim-mechanism (tensor)]
//        [--predict-only]]
//
// Allocates the trace's tensors (bytes scaled by S) with cuMemAlloc when they
// are born and frees them when they die, launches one kernel per trace kernel
// with pointers to its tensors as arguments; each kernel verifies what it
// reads and writes a pattern derived from (tensor id, version) into what it
// writes, and lasts the trace's duration (times T). Prints one JSON object:
// mismatches, measured iteration times, slowdown vs the compute sum, and,
// with --predict-*, memvirt-sim's prediction for the same scaled trace
// (--predict-layout shim-mechanism: paged and timed as the shim pages, Note
// [shim mechanism] in policy/sim/simulator.cc; shim: paged as the shim pages
// it but timed on overlapping copy engines, Note [shim layout] in
// memvirt/policy/shim_layout.h; --predict-only: the prediction alone, nothing
// is run on the driver).
// --corrupt-after K overwrites one word of a tensor behind the kernels' back
// after kernel K of the first iteration (a self-test: mismatches must show).
// Exit status: 0 no mismatch, 3 mismatches, 1 driver or trace error, 2 usage.

#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "memvirt/policy/shim_layout.h"
#include "memvirt/policy/simulator.h"
#include "memvirt/trace/memtrace.h"
#include "replay_abi.h"
#include "replay_plan.h"
#include "tools/cli_values.h"

namespace {

using memvirt::replay::kSlots;

constexpr char kUsage[] =
    "usage: memvirt-replay --trace FILE --scale S [--iterations N] [--time-scale T]\n"
    "                      [--kernels PATH] [--corrupt-after K]\n"
    "                      [--predict-device-memory BYTES [--predict-pcie-gbps X]\n"
    "                       [--predict-policy P] [--predict-host-memory BYTES]\n"
    "                       [--predict-ssd-gbps Y] [--predict-layout tensor|shim|shim-mechanism]\n"
    "                       [--predict-only]]\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "memvirt-replay: %s\n%s", error.c_str(), kUsage);
  return 2;
}

std::string DefaultKernelsPath() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "memvirt-replay-kernels.so";
  exe[n] = '\0';
  std::string dir(exe);
  dir.resize(dir.rfind('/'));
  return dir + "/../lib/memvirt-replay-kernels.so";
}

struct Failure {
  std::string what;
};

void Check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  throw Failure{std::string(call) + " failed: " + (name ? name : "unknown error")};
}
#define CU(call) Check((call), #call)

class Replayer {
 public:
  Replayer(const memvirt::trace::Trace& trace, const memvirt::replay::ReplayPlan& plan,
           CUfunction kernel, CUstream stream, CUdeviceptr counter)
      : trace_(trace),
        plan_(plan),
        kernel_(kernel),
        stream_(stream),
        counter_(counter),
        ptr_(plan.bytes.size(), 0),
        version_(plan.bytes.size(), 0) {}

  void AllocatePersistent() {
    for (uint32_t t : plan_.persistent) Allocate(t);
  }

  // Runs one iteration; returns its wall time in microseconds.
  double Iteration(int64_t corrupt_after) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const memvirt::replay::PlannedKernel& pk = plan_.kernels[k];
      for (uint32_t t : pk.allocate) Allocate(t);
      Launch(pk.slots, pk.us);
      ++launched_;
      if (static_cast<int64_t>(k) == corrupt_after) Corrupt(pk);
      for (uint32_t t : pk.release) Release(t);
    }
    CU(cuStreamSynchronize(stream_));
    const auto end = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(end - start).count();
  }

  void ReleasePersistent() {
    for (uint32_t t : plan_.persistent) Release(t);
  }

  uint64_t launched() const { return launched_; }
  uint64_t verified_bytes() const { return verified_bytes_; }

 private:
  void Allocate(uint32_t t) {
    CU(cuMemAlloc(&ptr_[t], plan_.bytes[t]));
    version_[t] = 0;
    if (plan_.needs_init[t]) Launch({{t, true}}, 0, /*initial=*/true);
  }

  void Release(uint32_t t) {
    CU(cuMemFree(ptr_[t]));  // synchronizes: the tensor's last kernel has run
    ptr_[t] = 0;
  }

  // Overwrites the first word of the kernel's first written (else read)
  // tensor after the kernel ran, so the next reader must see a mismatch.
  void Corrupt(const memvirt::replay::PlannedKernel& pk) {
    if (pk.slots.empty()) return;
    CU(cuStreamSynchronize(stream_));
    CU(cuMemsetD32(ptr_[pk.slots.back().tensor], 0xDEADBEEF, 2));
  }

  void Launch(const std::vector<memvirt::replay::PlannedSlot>& slots, double us,
              bool initial = false) {
    uint64_t duration_ns = static_cast<uint64_t>(us * 1e3);
    uint64_t count = slots.size();
    uint64_t write_mask = 0;
    CUdeviceptr ptrs[kSlots] = {};
    uint64_t bytes[kSlots] = {};
    uint64_t tags[kSlots] = {};
    for (size_t s = 0; s < slots.size(); ++s) {
      const uint32_t t = slots[s].tensor;
      ptrs[s] = ptr_[t];
      bytes[s] = plan_.bytes[t];
      if (slots[s].write) {
        write_mask |= uint64_t{1} << s;
        // A tensor read and written by the same kernel was verified against
        // its old version (earlier slot); it now gets the next one.
        if (!initial) ++version_[t];
      } else {
        verified_bytes_ += bytes[s];
      }
      tags[s] = memvirt::replay::ReplayTag(trace_.tensors[t].id, version_[t]);
    }
    void* params[4 + 3 * kSlots];
    params[0] = &duration_ns;
    params[1] = &count;
    params[2] = &write_mask;
    params[3] = &counter_;
    for (int s = 0; s < kSlots; ++s) {
      params[4 + s] = &ptrs[s];
      params[4 + kSlots + s] = &bytes[s];
      params[4 + 2 * kSlots + s] = &tags[s];
    }
    CU(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr));
  }

  const memvirt::trace::Trace& trace_;
  const memvirt::replay::ReplayPlan& plan_;
  CUfunction kernel_;
  CUstream stream_;
  CUdeviceptr counter_;
  std::vector<CUdeviceptr> ptr_;
  std::vector<uint64_t> version_;
  uint64_t launched_ = 0;
  uint64_t verified_bytes_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> v;
  bool predict_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--predict-only") {
      predict_only = true;
      continue;
    }
    static const char* kFlags[] = {"--trace",
                                   "--scale",
                                   "--iterations",
                                   "--time-scale",
                                   "--kernels",
                                   "--corrupt-after",
                                   "--predict-device-memory",
                                   "--predict-pcie-gbps",
                                   "--predict-policy",
                                   "--predict-host-memory",
                                   "--predict-ssd-gbps",
                                   "--predict-layout"};
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq), value = arg.substr(eq + 1), has_value = true;
    }
    bool known = false;
    for (const char* f : kFlags) known |= name == f;
    if (!known) return Usage("unknown flag '" + arg + "'");
    if (!has_value) {
      if (i + 1 >= argc) return Usage("flag " + name + " needs a value");
      value = argv[++i];
    }
    v[name] = value;
  }
  if (!v.count("--trace") || !v.count("--scale")) return Usage("--trace and --scale are required");
  auto scale = memvirt::policy::ParsePositiveNumber(v["--scale"]);
  if (!scale.ok()) return Usage("--scale: " + std::string(scale.status().message()));
  double time_scale = 1;
  if (v.count("--time-scale")) {
    auto ts = memvirt::policy::ParsePositiveNumber(v["--time-scale"]);
    if (!ts.ok()) return Usage("--time-scale: " + std::string(ts.status().message()));
    time_scale = *ts;
  }
  int iterations = 2;
  if (v.count("--iterations")) {
    auto n = memvirt::policy::ParsePositiveInt(v["--iterations"]);
    if (!n.ok()) return Usage("--iterations: " + std::string(n.status().message()));
    iterations = *n;
  }
  int64_t corrupt_after = -1;
  if (v.count("--corrupt-after")) {
    auto n = memvirt::policy::ParsePositiveInt(v["--corrupt-after"]);
    if (!n.ok()) return Usage("--corrupt-after: " + std::string(n.status().message()));
    corrupt_after = *n;
  }
  memvirt::policy::SimConfig predict;
  bool shim_layout = false;
  std::string layout_name = "tensor";
  const bool want_prediction = v.count("--predict-device-memory") > 0;
  if (want_prediction) {
    auto dev = memvirt::policy::ParseByteSize(v["--predict-device-memory"]);
    if (!dev.ok() || *dev == 0) return Usage("--predict-device-memory: bad size");
    predict.device_bytes = *dev;
    predict.host_bytes = uint64_t{1} << 40;
    predict.pcie_gbps = 15.754;
    predict.ssd_gbps = 3.2;
    predict.iterations = iterations;
    if (v.count("--predict-host-memory")) {
      auto h = memvirt::policy::ParseByteSize(v["--predict-host-memory"]);
      if (!h.ok()) return Usage("--predict-host-memory: bad size");
      predict.host_bytes = *h;
    }
    for (const char* flag : {"--predict-pcie-gbps", "--predict-ssd-gbps"}) {
      if (!v.count(flag)) continue;
      auto x = memvirt::policy::ParsePositiveNumber(v[flag]);
      if (!x.ok()) return Usage(std::string(flag) + ": " + std::string(x.status().message()));
      (std::strcmp(flag, "--predict-pcie-gbps") == 0 ? predict.pcie_gbps : predict.ssd_gbps) = *x;
    }
    auto kind = memvirt::policy::ParsePolicyKind(v.count("--predict-policy") ? v["--predict-policy"]
                                                                             : "lifetime");
    if (!kind.ok()) return Usage(std::string(kind.status().message()));
    predict.policy = *kind;
    const std::string layout = v.count("--predict-layout") ? v["--predict-layout"] : "tensor";
    if (layout != "tensor" && layout != "shim" && layout != "shim-mechanism") {
      return Usage("--predict-layout: expected tensor, shim or shim-mechanism");
    }
    shim_layout = layout != "tensor";
    predict.shim_mechanism = layout == "shim-mechanism";
    layout_name = layout;
  }
  if (predict_only && !want_prediction)
    return Usage("--predict-only needs --predict-device-memory");

  auto trace = memvirt::trace::ReadTrace(v["--trace"]);
  if (!trace.ok()) {
    std::fprintf(stderr, "memvirt-replay: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  auto plan = memvirt::replay::MakeReplayPlan(*trace, *scale, time_scale, kSlots);
  if (!plan.ok()) {
    std::fprintf(stderr, "memvirt-replay: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }

  std::string predicted_json;
  if (want_prediction) {
    memvirt::trace::Trace scaled = *trace;
    for (size_t t = 0; t < scaled.tensors.size(); ++t) scaled.tensors[t].bytes = plan->bytes[t];
    for (auto& k : scaled.kernels) k.us *= time_scale;
    if (predict.shim_mechanism) {
      // What the shim sees: the replay's own launches too.
      scaled = memvirt::replay::LaunchedTrace(scaled, *plan, &predict.prologue_kernels);
    }
    if (shim_layout) scaled = memvirt::policy::ShimLayout(scaled);
    auto r = memvirt::policy::Simulate(scaled, predict);
    if (!r.ok()) {
      std::fprintf(stderr, "memvirt-replay: prediction: %s\n",
                   std::string(r.status().message()).c_str());
      return 1;
    }
    predicted_json = memvirt::policy::FormatResultJson(*r, predict);
    if (predict_only) {
      std::printf("{\"trace\":\"%s\",\"layout\":\"%s\",\"predicted\":%s}\n", v["--trace"].c_str(),
                  layout_name.c_str(), predicted_json.c_str());
      return 0;
    }
  }

  std::vector<double> times;
  unsigned long long mismatches = 0;
  uint64_t launched = 0, verified = 0;
  try {
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CUmodule module;
    const std::string kernels = v.count("--kernels") ? v["--kernels"] : DefaultKernelsPath();
    CU(cuModuleLoad(&module, kernels.c_str()));
    CUfunction fn;
    CU(cuModuleGetFunction(&fn, module, memvirt::replay::kKernelName));
    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUdeviceptr counter;
    CU(cuMemAlloc(&counter, sizeof(unsigned long long)));
    CU(cuMemsetD32(counter, 0, 2));
    Replayer replayer(*trace, *plan, fn, stream, counter);
    replayer.AllocatePersistent();
    for (int it = 0; it < iterations; ++it) {
      times.push_back(replayer.Iteration(it == 0 ? corrupt_after : -1));
    }
    replayer.ReleasePersistent();
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(&mismatches, counter, sizeof(mismatches)));
    CU(cuMemFree(counter));
    CU(cuStreamDestroy(stream));
    CU(cuModuleUnload(module));
    CU(cuDevicePrimaryCtxRelease(dev));
    launched = replayer.launched();
    verified = replayer.verified_bytes();
  } catch (const Failure& f) {
    std::fprintf(stderr, "memvirt-replay: %s\n", f.what.c_str());
    return 1;
  }
  const double time_us = times.back();
  std::string out = "{\"trace\":\"" + v["--trace"] + "\"";
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                ",\"scale\":%g,\"time_scale\":%g,\"iterations\":%d,\"kernels_launched\":%llu,"
                "\"mismatches\":%llu,\"verified_bytes\":%llu,\"peak_bytes\":%llu,"
                "\"ideal_us\":%.3f,\"time_us\":%.3f,\"slowdown\":%.6f,\"per_iteration_us\":[",
                *scale, time_scale, iterations, static_cast<unsigned long long>(launched),
                mismatches, static_cast<unsigned long long>(verified),
                static_cast<unsigned long long>(plan->peak_bytes), plan->ideal_us, time_us,
                time_us / plan->ideal_us);
  out += buf;
  for (size_t i = 0; i < times.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s%.3f", i ? "," : "", times[i]);
    out += buf;
  }
  out += "]";
  if (!predicted_json.empty()) {
    out += ",\"predicted_layout\":\"" + layout_name + "\"";
    out += ",\"predicted\":" + predicted_json;
  }
  out += "}";
  std::printf("%s\n", out.c_str());
  return mismatches == 0 ? 0 : 3;
}

// memvirt-tracegen: writes a synthetic GPT-style training trace (memtrace-v1).
//
//   memvirt-tracegen --out FILE.jsonl[.gz] [--layers 24] [--hidden 1024]
//       [--heads 16] [--seq 1024] [--batch 8] [--vocab 50304]
//       [--tflops 150] [--hbm-gbps 2000]
//
// Prints a one-line summary (tensors, kernels, peak live bytes, ideal time)
// on stderr. Exit status: 0 ok, 1 write error, 2 bad command line.

#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>

#include "gpt_trace.h"
#include "memvirt/trace/memtrace.h"
#include "tools/cli_values.h"

namespace {

constexpr char kUsage[] =
    "usage: memvirt-tracegen --out FILE.jsonl[.gz] [--layers N] [--hidden N] [--heads N]\n"
    "                        [--seq N] [--batch N] [--vocab N] [--tflops X] [--hbm-gbps X]\n";

int Usage(const std::string& error) {
  std::fprintf(stderr, "memvirt-tracegen: %s\n%s", error.c_str(), kUsage);
  return 2;
}

// Peak of live tensor bytes: persistent ones always, others from their first
// use to their free.
uint64_t PeakLiveBytes(const memvirt::trace::Trace& t) {
  std::unordered_map<uint64_t, size_t> index;
  for (size_t i = 0; i < t.tensors.size(); ++i) index[t.tensors[i].id] = i;
  std::vector<bool> born(t.tensors.size(), false);
  std::unordered_map<uint64_t, std::vector<uint64_t>> frees;
  for (const auto& f : t.frees) frees[f.after_kernel].push_back(f.tensor);
  uint64_t live = 0, peak = 0;
  for (const auto& tensor : t.tensors)
    if (tensor.persistent) live += tensor.bytes;
  for (const auto& k : t.kernels) {
    for (const auto* list : {&k.reads, &k.writes}) {
      for (uint64_t id : *list) {
        const size_t i = index[id];
        if (!t.tensors[i].persistent && !born[i]) {
          born[i] = true;
          live += t.tensors[i].bytes;
        }
      }
    }
    peak = std::max(peak, live);
    for (uint64_t id : frees[k.id]) live -= t.tensors[index[id]].bytes;
  }
  return peak;
}

}  // namespace

int main(int argc, char** argv) {
  memvirt::tracegen::GptConfig c;
  std::string out;
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string name = arg, value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= argc) return Usage("flag " + arg + " needs a value");
      value = argv[++i];
    }
    values[name] = value;
  }
  for (const auto& [name, value] : values) {
    auto as_int = [&](auto* field) {
      auto v = memvirt::policy::ParsePositiveInt(value);
      if (!v.ok()) return false;
      *field = *v;
      return true;
    };
    auto as_number = [&](double* field) {
      auto v = memvirt::policy::ParsePositiveNumber(value);
      if (!v.ok()) return false;
      *field = *v;
      return true;
    };
    bool ok = true;
    if (name == "--out") {
      out = value;
    } else if (name == "--layers") {
      ok = as_int(&c.layers);
    } else if (name == "--hidden" || name == "--heads" || name == "--seq" || name == "--batch" ||
               name == "--vocab") {
      int v = 0;
      ok = as_int(&v);
      int64_t* field = name == "--hidden"  ? &c.hidden
                       : name == "--heads" ? &c.heads
                       : name == "--seq"   ? &c.seq
                       : name == "--batch" ? &c.batch
                                           : &c.vocab;
      *field = v;
    } else if (name == "--tflops") {
      ok = as_number(&c.peak_tflops);
    } else if (name == "--hbm-gbps") {
      ok = as_number(&c.hbm_gbps);
    } else {
      return Usage("unknown flag '" + name + "'");
    }
    if (!ok) return Usage("bad value for " + name + ": '" + value + "'");
  }
  if (out.empty()) return Usage("missing --out");
  if (c.hidden % c.heads != 0) return Usage("--hidden must be a multiple of --heads");
  memvirt::trace::Trace trace = memvirt::tracegen::MakeGptTrace(c);
  if (auto st = memvirt::trace::WriteTrace(trace, out); !st.ok()) {
    std::fprintf(stderr, "memvirt-tracegen: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  double ideal_us = 0;
  for (const auto& k : trace.kernels) ideal_us += k.us;
  std::fprintf(stderr,
               "memvirt-tracegen: wrote %s: %zu tensors, %zu kernels, peak_live_bytes %llu, "
               "ideal_us %.0f\n",
               out.c_str(), trace.tensors.size(), trace.kernels.size(),
               static_cast<unsigned long long>(PeakLiveBytes(trace)), ideal_us);
  return 0;
}

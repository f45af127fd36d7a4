// Runs memvirt-sim on the G10-derived traces with G10's system parameters
// (GPU 40 GiB, PCIe 15.754 GB/s each way, SSD 3.2 GB/s, host 128 GiB, two
// iterations, the second reported) and checks the lifetime policy against
// G10's best published slowdown and against the traffic lower bound: the
// default belady run, demand-only MIN with dead-data drop (docs/policy.md).

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "json_line.h"

namespace {

struct Run {
  double slowdown = 0;
  double traffic = 0;  // h2d + d2h + SSD read + SSD write bytes, reported iteration
  double ideal_us = 0;
  bool prefetch = false;  // the run used prefetch / evict-ahead
};

// Overridable by the environment (e.g. to point at another build or trace dir).
std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v == nullptr ? fallback : v;
}

Run Simulate(const std::string& trace, const std::string& policy) {
  const std::string cmd = Env("MEMVIRT_SIM", MEMVIRT_SIM_PATH) + " --trace " + trace +
                          " --policy " + policy +
                          " --device-memory 40Gi --host-memory 128Gi --pcie-gbps 15.754"
                          " --ssd-gbps 3.2 --iterations 2 --json";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (p == nullptr) return {};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd;
  auto json = memvirt::trace::ParseJson(out);
  EXPECT_TRUE(json.ok()) << out;
  if (!json.ok()) return {};
  const auto& o = json->object;
  Run r;
  r.slowdown = o.at("slowdown").number;
  r.traffic = o.at("h2d_bytes").number + o.at("d2h_bytes").number + o.at("ssd_read_bytes").number +
              o.at("ssd_write_bytes").number;
  r.prefetch = o.at("prefetch").boolean;
  r.ideal_us = o.at("ideal_us").number;
  return r;
}

void CheckTrace(const std::string& name, double g10_best_slowdown, double g10_ideal_ms) {
  const std::string path = Env("MEMVIRT_EVAL_DIR", MEMVIRT_EVAL_DIR) + "/" + name;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) GTEST_SKIP() << "trace not present: " << path;
  const Run lifetime = Simulate(path, "lifetime");
  const Run belady = Simulate(path, "belady");
  // The trace reproduces G10's ideal iteration time.
  EXPECT_NEAR(lifetime.ideal_us / 1e3, g10_ideal_ms, g10_ideal_ms * 1e-4);
  EXPECT_LE(lifetime.slowdown, g10_best_slowdown) << name;
  EXPECT_GE(lifetime.slowdown, 1.0);
  // The bound is the demand-only run; lifetime hides its traffic under compute.
  EXPECT_FALSE(belady.prefetch);
  EXPECT_TRUE(lifetime.prefetch);
  EXPECT_GT(belady.traffic, 0);
  EXPECT_LE(lifetime.traffic, 1.2 * belady.traffic)
      << name << ": lifetime " << lifetime.traffic << " bytes, bound " << belady.traffic;
  // A lower bound: LRU on the same settings moves at least as much.
  const Run lru = Simulate(path, "lru");
  EXPECT_GE(lru.traffic, belady.traffic) << name;
}

TEST(SimEvalTest, BertBase256BeatsG10) {
  CheckTrace("BERT_Base_256.jsonl.gz", 1.003508, 7285.465648);
}

TEST(SimEvalTest, ResNet152_1280BeatsG10) {
  CheckTrace("ResNet152_1280.jsonl.gz", 1.01626, 112589.384103);
}

}  // namespace

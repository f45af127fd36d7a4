// memvirt-bench: the shim's overheads, each measured side by side with the
// pass-through in the same run, on whatever libcuda.so.1 the loader finds
// (the simulated GPU by default).
//
//   memvirt-bench [--benchmark_filter=...]   shim benchmarks (Google Benchmark)
//   memvirt-bench nvme [...]                 NVMe tier benchmark, if built
//
// Counters:
//   BM_Launch/N/P/C   (P: 0 = MEMSHIM_POLICY=lru, 1 = lifetime; C: a loop of
//                     1 launch repeated, or of 16 distinct launches, see
//                     LaunchCycle) passthrough_ns:
//                     cuLaunchKernel on the driver alone; added_ns: the shim's
//                     work before it (argument scan of N pointers, residency
//                     check, sequence/event bookkeeping), with caches as the
//                     driver call leaves them. Both are wall-clock means of
//                     per-launch samples under 50 us (longer ones: the thread
//                     was descheduled), less clock_ns, the median cost of the
//                     clock reading itself in the same loop; added_p50_ns: the
//                     median instead of the mean (no batched event in it);
//                     events_per_1k: batched events per 1000 launches (Note
//                     [event pacing] in shim/core/stream_tracker.h).
//   BM_ShimLaunchWork/N/P/C  the shim's work alone, back to back (CPU time
//                     column = added ns per intercepted launch, warm caches);
//                     BM_DriverLaunch/N: the driver's launch alone.
//   BM_AllocFree/B    shim_ns: alloc+free pair from the shim's warm pool;
//                     passthrough_ns: cuMemAlloc+cuMemFree on the driver.
//   BM_Paging         paging_GBps: chunks paged device->host->device per
//                     second (bytes moved both ways); driver_copy_GBps: the
//                     same bytes with plain cuMemcpyDtoH/HtoD of 2 MiB on the
//                     same driver over as many distinct chunks as are paged;
//                     ratio = paging / driver copy; driver_copy_hot_GBps and
//                     ratio_hot: the same with one cache-resident 2 MiB buffer
//                     pair; host_memcpy_GBps: std::memcpy, for reference.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shim/core/config.h"
#include "shim/core/control_plane.h"
#include "shim/core/shim_core.h"
#include "shim/driver/driver.h"

#ifdef MEMVIRT_HAVE_NVME_BENCH
#include "bench/nvme/nvme_bench.h"
#endif

namespace memvirt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Second argument of the launch benchmarks: the residency policy.
constexpr const char* kPolicies[] = {"lru", "lifetime"};

void* Resolve(void* handle, const char* name) { return dlsym(handle, name); }

struct Env {
  shim::Driver driver;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction noop8 = nullptr, noop64 = nullptr;
  CUstream stream = nullptr;
  shim::StandaloneControlPlane control;
  bool ok = false;
};

std::string KernelsPath() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "memvirt_bench_kernels.so";
  exe[n] = '\0';
  std::string dir(exe);
  return dir.substr(0, dir.rfind('/')) + "/memvirt_bench_kernels.so";
}

Env& GetEnv() {
  static Env* env = [] {
    auto* e = new Env();
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr || !shim::LoadDriver(&Resolve, lib, &e->driver, nullptr)) return e;
    if (cuInit(0) != CUDA_SUCCESS) return e;
    CUdevice dev;
    if (cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return e;
    cuDevicePrimaryCtxRetain(&e->ctx, dev);
    cuCtxSetCurrent(e->ctx);
    if (cuModuleLoad(&e->module, KernelsPath().c_str()) == CUDA_SUCCESS) {
      cuModuleGetFunction(&e->noop8, e->module, "noop8");
      cuModuleGetFunction(&e->noop64, e->module, "noop64");
    }
    cuStreamCreate(&e->stream, CU_STREAM_NON_BLOCKING);
    e->ok = e->noop8 != nullptr && e->noop64 != nullptr;
    return e;
  }();
  cuCtxSetCurrent(env->ctx);
  return *env;
}

std::unique_ptr<shim::ShimCore> MakeCore(Env& env, uint64_t device, uint64_t host,
                                         const char* policy = nullptr) {
  // The same event settings the shim would take from this environment.
  const shim::ShimConfig config =
      shim::ParseShimConfig([](const char* name) -> const char* { return getenv(name); });
  shim::CoreOptions options;
  options.event_batch = config.event_batch;
  options.event_pace = config.event_pace;
  if (policy != nullptr) options.policy = policy;
  options.device_budget = device;
  options.host_budget = host;
  std::unique_ptr<shim::ShimCore> core;
  if (shim::ShimCore::Create(&env.driver, options, &env.control, &core) != CUDA_SUCCESS) {
    return nullptr;
  }
  return core;
}

// Samples above this are taken as the thread having been descheduled (the
// machines are shared) and left out of means; a batched event (a few us)
// stays in.
constexpr float kPreemptedNs = 50'000;

double Median(std::vector<float> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double MeanBelow(const std::vector<float>& v, float limit) {
  double sum = 0;
  size_t n = 0;
  for (float x : v) {
    if (x < limit) {
      sum += x;
      ++n;
    }
  }
  return n == 0 ? 0 : sum / static_cast<double>(n);
}

// Batched events the core recorded since `before`, per 1000 of `launches`.
double EventsPer1k(shim::ShimCore& core, uint64_t before, uint64_t launches) {
  return 1000.0 * static_cast<double>(core.stats().events_recorded - before) /
         static_cast<double>(launches);
}

// The argument lists of a launch loop with `period` distinct steps: step i
// passes `nargs` pointers, the first into a 2 MiB block of its own (so that
// the chunk sets, and what the policy sees, differ from step to step), the
// rest into 4 KiB blocks all steps share. With period 1 every launch is the
// same one (a loop the lifetime policy never takes for an iteration: Note
// [iteration detection] in policy/src/lifetime_policy.cc); with a longer
// period it learns the cycle and follows it, as in a training loop's steady
// state.
struct LaunchCycle {
  LaunchCycle(shim::ShimCore& core, int nargs, int period) : ptrs(period), params(period) {
    std::vector<CUdeviceptr> shared(nargs - 1);
    for (auto& p : shared) core.Alloc(&p, 4096);
    for (int i = 0; i < period; ++i) {
      ptrs[i].resize(nargs);
      core.Alloc(&ptrs[i][0], 2ull << 20);
      std::copy(shared.begin(), shared.end(), ptrs[i].begin() + 1);
      for (auto& p : ptrs[i]) params[i].push_back(&p);
    }
  }
  void** Next() {
    void** p = params[next].data();
    next = next + 1 == params.size() ? 0 : next + 1;
    return p;
  }
  std::vector<std::vector<CUdeviceptr>> ptrs;
  std::vector<std::vector<void*>> params;
  size_t next = 0;
};

void BM_Launch(benchmark::State& state) {
  Env& env = GetEnv();
  if (!env.ok) return state.SkipWithError("no driver or bench kernels");
  const int nargs = static_cast<int>(state.range(0));
  CUfunction f = nargs == 8 ? env.noop8 : env.noop64;
  const char* policy = kPolicies[state.range(1)];
  state.SetLabel(policy);
  auto core = MakeCore(env, 256ull << 20, 256ull << 20, policy);
  if (!core) return state.SkipWithError("core creation failed");
  LaunchCycle cycle(*core, nargs, static_cast<int>(state.range(2)));
  // Per-iteration samples (ns): the counters are robust statistics of them.
  std::vector<float> clock, added, pass;
  const uint64_t events_before = core->stats().events_recorded;
  uint64_t n = 0;
  for (auto _ : state) {
    void** params = cycle.Next();  // outside the timed window
    auto c0 = Clock::now();
    auto c1 = Clock::now();
    auto t0 = Clock::now();
    shim::ShimCore::Ticket ticket;
    core->BeforeLaunch(f, params, nullptr, env.stream, false, &ticket);
    ticket.Close();
    auto t1 = Clock::now();
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, env.stream, params, nullptr);
    auto t2 = Clock::now();
    clock.push_back(std::chrono::duration<float, std::nano>(c1 - c0).count());
    added.push_back(std::chrono::duration<float, std::nano>(t1 - t0).count());
    pass.push_back(std::chrono::duration<float, std::nano>(t2 - t1).count());
    if (++n % 256 == 0) {
      state.PauseTiming();
      cuStreamSynchronize(env.stream);
      state.ResumeTiming();
    }
  }
  cuStreamSynchronize(env.stream);
  core->TEST_Synchronize();
  const double clock_ns = Median(clock);
  state.counters["clock_ns"] = clock_ns;
  state.counters["added_ns"] = MeanBelow(added, kPreemptedNs) - clock_ns;
  state.counters["added_p50_ns"] = Median(added) - clock_ns;
  state.counters["passthrough_ns"] = MeanBelow(pass, kPreemptedNs) - clock_ns;
  state.counters["events_per_1k"] = EventsPer1k(*core, events_before, n);
}
BENCHMARK(BM_Launch)->ArgsProduct({{8, 64}, {0, 1}, {1, 16}});

// The shim's work per intercepted launch alone (no driver call): its CPU time
// per iteration is the added cost, robust against preemption on a loaded
// machine (BM_Launch's counters are wall-clock).
void BM_ShimLaunchWork(benchmark::State& state) {
  Env& env = GetEnv();
  if (!env.ok) return state.SkipWithError("no driver or bench kernels");
  const int nargs = static_cast<int>(state.range(0));
  CUfunction f = nargs == 8 ? env.noop8 : env.noop64;
  const char* policy = kPolicies[state.range(1)];
  state.SetLabel(policy);
  auto core = MakeCore(env, 256ull << 20, 256ull << 20, policy);
  if (!core) return state.SkipWithError("core creation failed");
  LaunchCycle cycle(*core, nargs, static_cast<int>(state.range(2)));
  const uint64_t events_before = core->stats().events_recorded;
  for (auto _ : state) {
    shim::ShimCore::Ticket ticket;
    core->BeforeLaunch(f, cycle.Next(), nullptr, env.stream, false, &ticket);
  }
  state.counters["events_per_1k"] = EventsPer1k(*core, events_before, state.iterations());
  core->TEST_Synchronize();
}
BENCHMARK(BM_ShimLaunchWork)->ArgsProduct({{8, 64}, {0, 1}, {1, 16}});

// cuLaunchKernel on the driver alone, for the same kernels.
void BM_DriverLaunch(benchmark::State& state) {
  Env& env = GetEnv();
  if (!env.ok) return state.SkipWithError("no driver or bench kernels");
  const int nargs = static_cast<int>(state.range(0));
  CUfunction f = nargs == 8 ? env.noop8 : env.noop64;
  std::vector<CUdeviceptr> ptrs(nargs, 0);
  std::vector<void*> params;
  for (auto& p : ptrs) params.push_back(&p);
  uint64_t n = 0;
  for (auto _ : state) {
    cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, env.stream, params.data(), nullptr);
    if (++n % 256 == 0) cuStreamSynchronize(env.stream);
  }
  cuStreamSynchronize(env.stream);
}
BENCHMARK(BM_DriverLaunch)->Arg(8)->Arg(64);

void BM_AllocFree(benchmark::State& state) {
  Env& env = GetEnv();
  if (!env.ok) return state.SkipWithError("no driver");
  const uint64_t bytes = static_cast<uint64_t>(state.range(0));
  auto core = MakeCore(env, 256ull << 20, 256ull << 20);
  if (!core) return state.SkipWithError("core creation failed");
  CUdeviceptr warm;
  core->Alloc(&warm, bytes);
  core->Free(warm);
  double shim_ns = 0;
  uint64_t n = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    CUdeviceptr p;
    core->Alloc(&p, bytes);
    core->Free(p);
    shim_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    ++n;
  }
  // The driver's own pair, measured in the same run.
  double pass_ns = 0;
  constexpr int kDriverPairs = 200;
  for (int i = 0; i < kDriverPairs; ++i) {
    auto t0 = Clock::now();
    CUdeviceptr p;
    if (cuMemAlloc(&p, bytes) == CUDA_SUCCESS) cuMemFree(p);
    pass_ns += std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  }
  state.counters["shim_ns"] = shim_ns / n;
  state.counters["passthrough_ns"] = pass_ns / kDriverPairs;
}
BENCHMARK(BM_AllocFree)->Arg(4096)->Arg(4 << 20);

void BM_Paging(benchmark::State& state) {
  Env& env = GetEnv();
  if (!env.ok) return state.SkipWithError("no driver");
  constexpr uint64_t kChunk = shim::kChunkBytes;
  constexpr int kBudgetChunks = 32;
  auto core = MakeCore(env, kBudgetChunks * kChunk, 256 * kChunk);
  if (!core) return state.SkipWithError("core creation failed");
  // Twice the budget, touched round-robin: every touch pages one chunk in
  // and one out (2 x 2 MiB moved).
  std::vector<CUdeviceptr> blocks(2 * kBudgetChunks);
  for (auto& b : blocks) core->Alloc(&b, kChunk);
  size_t i = 0;
  uint64_t touches = 0;
  auto touch = [&] {
    shim::MemRange r{blocks[i++ % blocks.size()], kChunk};
    shim::ShimCore::Ticket t;
    core->BeforeAccess(&r, 1, env.stream, false, /*synchronous=*/false, &t);
  };
  for (size_t w = 0; w < 2 * blocks.size(); ++w) touch();  // warm up: all chunks backed
  const auto before = core->stats();
  auto t0 = Clock::now();
  for (auto _ : state) {
    touch();
    ++touches;
  }
  core->TEST_Synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto after = core->stats();
  const double moved =
      double(after.page_ins - before.page_ins + after.evictions - before.evictions) * kChunk;
  // The same bytes moved by plain driver copies between device memory and
  // pinned host memory, 2 MiB at a time, alternating directions, over
  // `footprint` distinct chunks on each side. footprint = the paged set
  // (blocks.size()): the same sizes and the same memory traffic as paging;
  // footprint = 1: one cache-resident buffer pair (an upper bound).
  auto driver_copies = [&](size_t footprint, double* copied) {
    CUdeviceptr dev = 0;
    void* host = nullptr;
    double cseconds = 0;
    *copied = 0;
    if (cuMemAlloc(&dev, footprint * kChunk) == CUDA_SUCCESS &&
        cuMemHostAlloc(&host, footprint * kChunk, 0) == CUDA_SUCCESS) {
      std::memset(host, 3, footprint * kChunk);
      cuMemsetD8(dev, 4, footprint * kChunk);
      auto c0 = Clock::now();
      for (size_t k = 0; *copied < moved || k < 64; ++k) {
        const size_t at = (k / 2) % footprint * kChunk;
        if (k % 2 == 0) {
          cuMemcpyDtoH(static_cast<char*>(host) + at, dev + at, kChunk);
        } else {
          cuMemcpyHtoD(dev + at, static_cast<char*>(host) + at, kChunk);
        }
        *copied += kChunk;
      }
      cseconds = std::chrono::duration<double>(Clock::now() - c0).count();
    }
    if (host != nullptr) cuMemFreeHost(host);
    if (dev != 0) cuMemFree(dev);
    return cseconds;
  };
  double copied = 0, hot_copied = 0;
  const double cseconds = driver_copies(blocks.size(), &copied);
  const double hot_seconds = driver_copies(1, &hot_copied);
  // And by host memcpy, for reference.
  std::vector<char> a(kChunk * 16), b(kChunk * 16);
  std::memset(a.data(), 1, a.size());
  std::memset(b.data(), 2, b.size());
  auto m0 = Clock::now();
  double mcopied = 0;
  for (size_t k = 0; mcopied < moved || k < 64; ++k) {
    std::memcpy(b.data() + (k % 16) * kChunk, a.data() + ((k + 5) % 16) * kChunk, kChunk);
    mcopied += kChunk;
  }
  benchmark::DoNotOptimize(b.data());
  const double mseconds = std::chrono::duration<double>(Clock::now() - m0).count();
  const double paging = moved / seconds / 1e9;
  const double copy_rate = cseconds > 0 ? copied / cseconds / 1e9 : 0;
  const double hot_rate = hot_seconds > 0 ? hot_copied / hot_seconds / 1e9 : 0;
  state.counters["paging_GBps"] = paging;
  state.counters["driver_copy_GBps"] = copy_rate;
  state.counters["driver_copy_hot_GBps"] = hot_rate;
  state.counters["ratio_hot"] = hot_rate > 0 ? paging / hot_rate : 0;
  state.counters["host_memcpy_GBps"] = mcopied / mseconds / 1e9;
  state.counters["ratio"] = copy_rate > 0 ? paging / copy_rate : 0;
  state.counters["touches"] = double(touches);
}
BENCHMARK(BM_Paging)->Iterations(2000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace memvirt::bench

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "nvme") == 0) {
#ifdef MEMVIRT_HAVE_NVME_BENCH
    return memvirt::bench::NvmeMain(argc - 1, argv + 1);
#else
    std::fprintf(stderr, "nvme benchmark not built\n");
    return 2;
#endif
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

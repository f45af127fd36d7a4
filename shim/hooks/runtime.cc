#include "shim/hooks/runtime.h"

#include <dlfcn.h>

#include <cstdlib>

#include "shim/core/log.h"
#include "shim/hooks/daemon_plugin.h"
#include "shim/hooks/entry_point_table.h"
#include "shim/hooks/libc_symbols.h"

namespace memvirt::shim::hooks {
namespace {

thread_local bool t_initializing = false;

void* ResolveFromLibcuda(void* context, const char* name) {
  DlsymFn real_dlsym = RealDlsym();
  return real_dlsym != nullptr ? real_dlsym(context, name) : nullptr;
}

const char* DefaultDaemonSocket() { return "/run/memvirt/memvirtd.sock"; }

const char* GetEnv(const char* name) { return getenv(name); }

}  // namespace

Runtime& Runtime::Get() {
  // Leaked on purpose: hooks may run during exit, after static destructors.
  static Runtime* runtime = new Runtime();
  static std::once_flag once;
  if (!runtime->ready() && !t_initializing) {
    std::call_once(once, [] {
      t_initializing = true;
      runtime->Initialize();
      t_initializing = false;
    });
  }
  return *runtime;
}

void* Runtime::SubstituteProc(const char* symbol, void* real, int version, cuuint64_t flags) const {
  if (config_.disabled || real == nullptr || symbol == nullptr) return real;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const EntryPointFlavour* flavour = FlavourFor(symbol, version, per_thread);
  if (flavour == nullptr) return Substitute(real);  // a name or version the table does not know
  auto it = hook_of_flavour_.find(flavour->symbol);
  if (it == hook_of_flavour_.end()) {
    int count = 0;
    const EntryPointFlavour* all = FlavoursOf(symbol, &count);
    for (int i = 0; i < count; ++i) {
      if (hook_of_flavour_.count(all[i].symbol) != 0) {  // hook_list.h misses a flavour
        MEMSHIM_LOG(kError, "cuGetProcAddress(%s, %d): flavour %s is not hooked; passed through",
                    symbol, version, flavour->symbol);
        break;
      }
    }
    return real;  // an entry point the shim lets be
  }
  auto by_address = hook_of_real_.find(real);
  if (by_address != hook_of_real_.end() && by_address->second != it->second) {
    MEMSHIM_LOG(kWarn,
                "cuGetProcAddress(%s, %d, %llu): the driver answered another flavour than "
                "%s; handing out the hook of %s",
                symbol, version, static_cast<unsigned long long>(flags), flavour->symbol,
                flavour->symbol);
  }
  return it->second;
}

void Runtime::Initialize() {
  config_ = ParseShimConfig(&GetEnv);
  SetLogLevel(config_.log_level);
  DlsymFn real_dlsym = RealDlsym();
  if (real_dlsym == nullptr) {
    MEMSHIM_LOG(kError, "cannot locate the C library's dlsym; the shim is inactive");
    config_.disabled = true;
    ready_.store(true, std::memory_order_release);
    return;
  }
  libcuda_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda_ == nullptr) {
    MEMSHIM_LOG(kError, "cannot load libcuda.so.1 (%s); the shim is inactive", dlerror());
    config_.disabled = true;
    ready_.store(true, std::memory_order_release);
    return;
  }
#define MEMSHIM_RESOLVE_REAL(name)                                                         \
  real_.name = reinterpret_cast<decltype(real_.name)>(real_dlsym(libcuda_, #name));        \
  if (real_.name != nullptr) {                                                             \
    hook_of_real_[reinterpret_cast<void*>(real_.name)] = reinterpret_cast<void*>(&::name); \
  }                                                                                        \
  hook_of_flavour_[#name] = reinterpret_cast<void*>(&::name);
  MEMSHIM_HOOKED_FUNCTIONS(MEMSHIM_RESOLVE_REAL)
#undef MEMSHIM_RESOLVE_REAL
  const char* missing = nullptr;
  driver_ok_ = LoadDriver(&ResolveFromLibcuda, libcuda_, &driver_, &missing);
  if (!driver_ok_) {
    MEMSHIM_LOG(kError, "libcuda.so.1 lacks %s; the shim passes everything through",
                missing != nullptr ? missing : "?");
  }
  if (config_.disabled) {
    MEMSHIM_LOG(kInfo, "MEMSHIM_DISABLE set: pure pass-through");
  }
  daemon_socket_ = config_.daemon_socket.empty() ? DefaultDaemonSocket() : config_.daemon_socket;
  ready_.store(true, std::memory_order_release);
}

namespace {

// Note [exit summary]
//   With MEMSHIM_LOG=info or debug, each core's use of its device is logged
//   once at exit ("device D: ... device chunks peak P of budget L ..."): what
//   an operator checks after a run, and what the multi-device test reads.
//   Only then: the summary takes each core's lock, which a thread that is
//   still running could hold while the process exits.
void LogExitSummary() {
  Runtime::Get().ForEachCore([](ShimCore* core) {
    const CoreStats s = core->stats();
    MEMSHIM_LOG(
        kInfo,
        "device %d: device chunks peak %u of budget %u, %llu page-ins, %llu evictions, "
        "%llu launches, %llu demotions, host slots asked of other cores %llu times "
        "(%llu MiB given back)",
        static_cast<int>(core->device()), s.device_chunks_peak, s.device_chunk_limit,
        static_cast<unsigned long long>(s.page_ins), static_cast<unsigned long long>(s.evictions),
        static_cast<unsigned long long>(s.launches), static_cast<unsigned long long>(s.demotions),
        static_cast<unsigned long long>(s.host_reclaims_asked),
        static_cast<unsigned long long>(s.host_bytes_reclaimed >> 20));
  });
}

}  // namespace

ShimCore* Runtime::CoreOfCurrentDevice() const {
  CUdevice device = -1;
  if (driver_.cuCtxGetDevice == nullptr || driver_.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    return nullptr;
  }
  return CoreOfDevice(device);
}

// Note [per-device budgets]
//   Every core asks its control plane for its device's budget. With a daemon,
//   each device's core gets its own view of the one daemon link
//   (ControlPlane::ForDevice): the first registers the process with its GPU,
//   each further one adds its GPU to that registration, and budget directives
//   reach the core of the GPU they name (Note [several devices] in
//   shim/daemon_link/daemon_control_plane.cc). Standalone, every core runs
//   with its local budget (MEMSHIM_DEVICE_BUDGET or 90% of that device's free
//   memory). The host budget is one for the process, whatever the number of
//   devices: every core draws from the same ledger (Note [shared host budget]
//   in shim/core/host_ledger.h), and with a daemon every core gets the NVMe
//   tier and the host-tier directives (Note [several devices]).
ControlPlane* Runtime::ControlFor(CUdevice device) {
  if (control_ == nullptr) {  // once: the daemon link, if there is a daemon
    control_ = LoadDaemonControlPlane(config_, daemon_socket_.c_str());
    if (control_ == nullptr) control_ = &standalone_;
  }
  return control_->ForDevice(device);
}

ShimCore* Runtime::CoreForAlloc() {
  // One device: its core, without asking the driver (Note [core routing]).
  if (ShimCore* only = only_core()) return only;
  if (config_.disabled || !driver_ok_ || !ready()) return nullptr;
  CUdevice device = -1;
  if (driver_.cuCtxGetDevice(&device) != CUDA_SUCCESS) return nullptr;  // no context yet
  if (device < 0 || device >= kMaxDevices) return nullptr;
  ShimCore* core = by_device_[device].load(std::memory_order_acquire);
  if (core != nullptr) return core;
  if (creation_failed_[device].load(std::memory_order_relaxed)) return nullptr;
  MutexLock lock(&create_mu_);
  core = by_device_[device].load(std::memory_order_acquire);
  if (core != nullptr) return core;
  CoreOptions options;
  options.device_budget = config_.device_budget;
  options.host_budget = config_.host_budget;
  options.host_ledger = &host_ledger_;
  options.overflow_ledger = &overflow_ledger_;
  options.host_peers = &peer_cores_;
  options.va_bytes = config_.va_bytes;
  options.event_batch = config_.event_batch;
  options.event_pace = config_.event_pace;
  options.policy = config_.policy;
  options.hidden_reach_all = config_.hidden_reach_all;
  std::unique_ptr<ShimCore> created;
  CUresult r = ShimCore::Create(&driver_, options, ControlFor(device), &created);
  if (r == CUDA_ERROR_INVALID_CONTEXT) return nullptr;  // retry once a context exists
  if (r != CUDA_SUCCESS) {
    MEMSHIM_LOG(kError,
                "device %d: virtual device memory unavailable (%d); passing its allocations "
                "through",
                device, r);
    creation_failed_[device].store(true);
    return nullptr;
  }
  core = created.release();  // lives until exit (see Get())
  const int n = num_cores_.load(std::memory_order_relaxed);
  cores_[n].store(core, std::memory_order_relaxed);
  by_device_[device].store(core, std::memory_order_release);
  int devices = 0;
  const bool one_device = driver_.cuDeviceGetCount != nullptr &&
                          driver_.cuDeviceGetCount(&devices) == CUDA_SUCCESS && devices == 1;
  // Note [core routing]: a second core (or a second device) ends the shortcut.
  only_core_.store(n == 0 && one_device ? core : nullptr, std::memory_order_release);
  num_cores_.store(n + 1, std::memory_order_release);
  if (n == 0 && LogEnabled(LogLevel::kInfo)) std::atexit(&LogExitSummary);
  if (n > 0) MEMSHIM_LOG(kInfo, "device %d: virtual device memory of its own (core %d)", device, n);
  return core;
}

uint64_t Runtime::PeerCores::ReclaimHostFromPeers(const ShimCore* asker, uint64_t bytes) {
  uint64_t freed = 0;
  runtime_->ForEachCore([&](ShimCore* core) {
    if (core != asker && freed < bytes) freed += core->GiveBackHostBytes(bytes - freed);
  });
  return freed;
}

bool Runtime::PeerCores::ReleasePeerFrees(const ShimCore* asker) {
  bool released = false;
  runtime_->ForEachCore([&](ShimCore* core) {
    if (core != asker) released |= core->ReleaseCompletedFrees();
  });
  return released;
}

void* Runtime::Substitute(void* real) const {
  if (config_.disabled || real == nullptr) return real;
  auto it = hook_of_real_.find(real);
  return it == hook_of_real_.end() ? real : it->second;
}

}  // namespace memvirt::shim::hooks

// memvirtd: the memvirt node daemon. See docs/operations.md.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/core/clock.h"
#include "daemon/core/node_state.h"
#include "daemon/core/size_parse.h"
#include "daemon/server/client_stream_service.h"
#include "daemon/server/config.h"
#include "daemon/server/driver_inventory.h"
#include "daemon/server/metrics.h"
#include "daemon/server/operator_service.h"
#include "daemon/server/peer_listener.h"
#include "daemon/server/pid_watcher.h"
#include "daemon/server/tier_service.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "memvirt/nvme/swap_file.h"
#include "memvirt/nvme/swap_store.h"
#include "memvirt/nvme/uring_io_engine.h"

DEFINE_string(config, "",
              "Config file (versioned key = value lines), e.g. /etc/memvirt/memvirtd.conf");
DEFINE_string(socket, "/run/memvirt/memvirtd.sock", "Unix socket to serve on (mode 0660)");
DEFINE_string(socket_group, "", "Group (name or gid) owning the socket; empty: the daemon's");
DEFINE_string(admin_group, "", "Group (name or gid) allowed operator calls besides root");
DEFINE_string(gpu, "", "Known GPUs as UUID:SIZE[,UUID:SIZE...]; others are learned from clients");
DEFINE_string(driver_library, "libcuda.so.1",
              "Without --gpu, the CUDA driver library whose devices are the known GPUs (empty: no "
              "query; no driver: GPUs are learned from trusted clients)");
DEFINE_string(reserve, "256M", "HBM per GPU kept out of every budget");
DEFINE_string(host_memory, "0", "Host tier capacity shared by all clients (0 = unlimited)");
DEFINE_int32(shrink_deadline_ms, 2000, "Time a client has to comply with a shrink");
DEFINE_int32(restart_grace_ms, 1500,
             "After startup, budgets grow only into memory clients already hold for this long");
DEFINE_int32(hint_interval_ms, 100, "Hint batch period suggested to clients");
DEFINE_string(metrics_listen, "", "host:port of the Prometheus endpoint (empty: off)");
DEFINE_int32(shutdown_timeout_ms, 500, "Deadline for in-flight calls at shutdown");
DEFINE_int32(tick_ms, 100, "Period of deadline checks");
DEFINE_string(swap_dir, "", "Directory of the NVMe tier's swap files (empty: no NVMe tier)");
DEFINE_string(swap_size, "0", "Total size of the swap files, e.g. 64G (required with --swap_dir)");
DEFINE_int32(swap_files, 1, "Number of swap files the size is split over");
DEFINE_int32(swap_queue_depth, 16, "io_uring queue depth of the NVMe tier");
DEFINE_bool(swap_verify_crc, true, "CRC32C per 2 MiB extent, verified on every read");
DEFINE_int32(max_connections, 1024, "Connections to the socket served at once");
DEFINE_int32(max_connections_per_uid, 128, "Connections to the socket per uid (root: no limit)");
DEFINE_int32(connection_idle_timeout_ms, 300000,
             "A connection to the socket with no call in progress is closed after this long");
DEFINE_int32(tier_max_connections, 1024, "Connections to the tier socket served at once");
DEFINE_int32(tier_max_pending_per_uid, 16,
             "Tier connections per uid that have not completed their hello");
DEFINE_int32(tier_max_connections_per_client, 16,
             "Tier connections per registered process (the shim opens one per GPU)");
DEFINE_int32(tier_idle_timeout_ms, 300000,
             "A tier connection whose process stores nothing is closed after this long idle "
             "(0: never)");

namespace memvirt::daemon {
namespace {

std::atomic<int> g_signal{0};
int g_wake_fd = -1;

void OnSignal(int sig) {
  g_signal.store(sig);
  const uint64_t one = 1;
  (void)!write(g_wake_fd, &one, sizeof(one));
}

// clang-format off
const std::vector<std::string> kLayeredFlags = {
    "socket", "socket_group", "admin_group", "gpu", "driver_library", "reserve", "host_memory",
    "shrink_deadline_ms", "restart_grace_ms", "hint_interval_ms", "metrics_listen",
    "shutdown_timeout_ms", "tick_ms", "swap_dir", "swap_size", "swap_files", "swap_queue_depth",
    "swap_verify_crc", "max_connections", "max_connections_per_uid", "connection_idle_timeout_ms",
    "tier_max_connections", "tier_max_pending_per_uid", "tier_max_connections_per_client",
    "tier_idle_timeout_ms"};
// clang-format on

absl::Status LoadLayers() {
  std::string path = FLAGS_config;
  if (path.empty()) {
    if (const char* env = std::getenv("MEMVIRTD_CONFIG")) path = env;
  }
  std::map<std::string, std::string> file_values;
  if (!path.empty()) {
    absl::StatusOr<std::map<std::string, std::string>> v = ReadConfigFile(path);
    if (!v.ok()) return v.status();
    file_values = *std::move(v);
  }
  FlagAccess access{
      .names = kLayeredFlags,
      .set_on_command_line =
          [](const std::string& n) {
            gflags::CommandLineFlagInfo info;
            return gflags::GetCommandLineFlagInfo(n.c_str(), &info) && !info.is_default;
          },
      .set =
          [](const std::string& n, const std::string& v) {
            if (gflags::SetCommandLineOption(n.c_str(), v.c_str()).empty()) {
              return absl::InvalidArgumentError(absl::StrCat("bad value '", v, "' for ", n));
            }
            return absl::OkStatus();
          },
      .getenv = [](const std::string& n) -> std::optional<std::string> {
        const char* v = std::getenv(n.c_str());
        if (v == nullptr) return std::nullopt;
        return std::string(v);
      }};
  return ApplyConfigLayers(file_values, access);
}

absl::StatusOr<NodeOptions> OptionsFromFlags() {
  NodeOptions o;
  absl::StatusOr<uint64_t> reserve = ParseBytes(FLAGS_reserve);
  if (!reserve.ok()) return reserve.status();
  o.reserve_bytes = *reserve;
  absl::StatusOr<uint64_t> host = ParseBytes(FLAGS_host_memory);
  if (!host.ok()) return host.status();
  o.host_capacity_bytes = *host;
  absl::StatusOr<std::vector<StaticGpu>> gpus = ParseGpuList(FLAGS_gpu);
  if (!gpus.ok()) return gpus.status();
  o.gpus = *std::move(gpus);
  if (o.gpus.empty() && !FLAGS_driver_library.empty()) {
    DriverInventory inventory = QueryDriverInventory(FLAGS_driver_library);
    for (const StaticGpu& g : inventory.gpus) {
      LOG(INFO) << "GPU " << g.gpu_uuid << " with " << g.device_memory_bytes
                << " bytes from the driver";
    }
    if (inventory.gpus.empty()) {
      LOG(INFO) << "no GPUs from the driver (" << inventory.problem
                << "); GPUs come from trusted registrations (Note [GPU inventory])";
    }
    o.gpus = std::move(inventory.gpus);
  }
  absl::StatusOr<std::optional<gid_t>> admin = ResolveGroup(FLAGS_admin_group);
  if (!admin.ok()) return admin.status();
  o.admin_gid = *admin;
  if (FLAGS_shrink_deadline_ms <= 0 || FLAGS_restart_grace_ms < 0 || FLAGS_hint_interval_ms <= 0 ||
      FLAGS_tick_ms <= 0 || FLAGS_shutdown_timeout_ms < 0) {
    return absl::InvalidArgumentError("time flags must be positive");
  }
  o.shrink_deadline = absl::Milliseconds(FLAGS_shrink_deadline_ms);
  o.restart_grace = absl::Milliseconds(FLAGS_restart_grace_ms);
  o.hint_interval_ms = static_cast<uint32_t>(FLAGS_hint_interval_ms);
  o.gpu_size_trusted_uids = {geteuid()};
  return o;
}

// The NVMe tier (docs/nvme.md): swap files, io_uring engine, store and the tier socket, in
// construction order; destroyed in reverse (the service first, so no request is in flight).
struct NvmeTier {
  std::unique_ptr<nvme::SwapFileSet> files;
  std::unique_ptr<nvme::UringIoEngine> engine;
  std::unique_ptr<nvme::SwapStore> store;
  std::unique_ptr<TierService> service;
};

absl::StatusOr<std::unique_ptr<NvmeTier>> StartNvmeTier(NodeState* node,
                                                        std::optional<gid_t> socket_group) {
  absl::StatusOr<uint64_t> size = ParseBytes(FLAGS_swap_size);
  if (!size.ok()) return size.status();
  if (*size == 0) return absl::InvalidArgumentError("--swap_dir needs a non-zero --swap_size");
  if (FLAGS_swap_files <= 0 || FLAGS_swap_queue_depth <= 0) {
    return absl::InvalidArgumentError("--swap_files and --swap_queue_depth must be positive");
  }
  if (FLAGS_tier_max_connections <= 0 || FLAGS_tier_max_pending_per_uid <= 0 ||
      FLAGS_tier_max_connections_per_client <= 0 || FLAGS_tier_idle_timeout_ms < 0) {
    return absl::InvalidArgumentError("--tier_max_* must be positive, --tier_idle_timeout_ms >= 0");
  }
  auto tier = std::make_unique<NvmeTier>();
  absl::StatusOr<std::unique_ptr<nvme::SwapFileSet>> files =
      nvme::SwapFileSet::Open({.dir = FLAGS_swap_dir,
                               .total_bytes = *size,
                               .file_count = FLAGS_swap_files,
                               .allow_buffered = true});
  if (!files.ok()) return files.status();
  tier->files = *std::move(files);
  absl::StatusOr<std::unique_ptr<nvme::UringIoEngine>> engine = nvme::UringIoEngine::Create(
      tier->files->uring_files(), {.queue_depth = static_cast<unsigned>(FLAGS_swap_queue_depth)});
  if (!engine.ok()) return engine.status();
  tier->engine = *std::move(engine);
  absl::StatusOr<std::unique_ptr<nvme::SwapStore>> store =
      nvme::SwapStore::Create(tier->engine.get(), {.verify_crc = FLAGS_swap_verify_crc});
  if (!store.ok()) return store.status();
  tier->store = *std::move(store);
  absl::StatusOr<std::unique_ptr<TierService>> service = TierService::Start(
      {.socket_path = FLAGS_socket + tier::kTierSocketSuffix,
       .group = socket_group,
       .tenant_of = [node](const PeerCredentials& peer) -> std::optional<uint64_t> {
         absl::StatusOr<ClientSnapshot> c = node->GetClient(peer, peer.pid);
         if (!c.ok() || c->creds.uid != peer.uid) return std::nullopt;
         return c->client_id;
       },
       .max_connections = static_cast<size_t>(FLAGS_tier_max_connections),
       .max_pending_per_uid = static_cast<size_t>(FLAGS_tier_max_pending_per_uid),
       .max_connections_per_client = static_cast<size_t>(FLAGS_tier_max_connections_per_client),
       .idle_timeout = FLAGS_tier_idle_timeout_ms == 0
                           ? absl::InfiniteDuration()
                           : absl::Milliseconds(FLAGS_tier_idle_timeout_ms)},
      tier->store.get());
  if (!service.ok()) return service.status();
  tier->service = *std::move(service);
  LOG(INFO) << "NVMe tier: " << tier->files->total_bytes() << " bytes in "
            << tier->files->files().size() << " file(s) under " << FLAGS_swap_dir
            << (tier->files->direct_io() ? " (O_DIRECT)" : " (buffered: no O_DIRECT here)")
            << ", tier socket " << FLAGS_socket << tier::kTierSocketSuffix;
  return tier;
}

int Run() {
  if (absl::Status s = LoadLayers(); !s.ok()) {
    LOG(ERROR) << s;
    return 2;
  }
  absl::StatusOr<NodeOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    LOG(ERROR) << "bad configuration: " << options.status();
    return 2;
  }
  absl::StatusOr<std::optional<gid_t>> socket_group = ResolveGroup(FLAGS_socket_group);
  if (!socket_group.ok()) {
    LOG(ERROR) << socket_group.status();
    return 2;
  }
  NodeState node(*options, SystemClock::Get());
  if (absl::Status s = node.Validate(); !s.ok()) {
    LOG(ERROR) << "bad configuration: " << s;
    return 2;
  }

  // Note [signals]: gRPC starts threads from static initializers, before main(), so a
  // blocked-signal mask cannot cover every thread. A handler records the signal and wakes
  // the main loop through an eventfd instead (both async-signal-safe).
  g_wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (g_wake_fd < 0) {
    PLOG(ERROR) << "eventfd";
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  PeerListener listener;
  if (FLAGS_max_connections <= 0 || FLAGS_max_connections_per_uid <= 0 ||
      FLAGS_connection_idle_timeout_ms <= 0) {
    LOG(ERROR) << "bad configuration: --max_connections, --max_connections_per_uid and "
                  "--connection_idle_timeout_ms must be positive";
    return 2;
  }
  const ConnectionLimits limits{
      .max_connections = static_cast<size_t>(FLAGS_max_connections),
      .max_connections_per_uid = static_cast<size_t>(FLAGS_max_connections_per_uid)};
  // Note [tier before socket]: the NVMe tier's socket exists before the daemon's socket does, so
  // a process that finds the daemon also finds its tier (one that registered in between would
  // run without the NVMe tier for its lifetime).
  std::unique_ptr<NvmeTier> nvme_tier;
  if (!FLAGS_swap_dir.empty()) {
    absl::StatusOr<std::unique_ptr<NvmeTier>> t = StartNvmeTier(&node, *socket_group);
    if (!t.ok()) {
      LOG(ERROR) << "cannot start the NVMe tier: " << t.status();
      return 1;
    }
    nvme_tier = *std::move(t);
  }
  if (absl::Status s = listener.Bind({FLAGS_socket, *socket_group}, limits); !s.ok()) {
    LOG(ERROR) << "cannot serve on " << FLAGS_socket << ": " << s;
    return 1;
  }

  PidWatcher pids([&node](uint64_t client) {
    LOG(INFO) << "client " << client << " exited";
    node.Unregister(client);
  });
  ClientStreamService streams(&node, &listener, &pids, options->hint_interval_ms);
  OperatorService operators(&node, &listener);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Note [gRPC connection limits] in peer_listener.h.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, FLAGS_connection_idle_timeout_ms);
  builder.RegisterService(&streams);
  builder.RegisterService(&operators);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    LOG(ERROR) << "cannot start the gRPC server";
    return 1;
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  listener.Start(server.get());

  std::unique_ptr<MetricsEndpoint> metrics;
  if (!FLAGS_metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsEndpoint>> m = StartMetricsEndpoint(
        FLAGS_metrics_listen, &node,
        nvme_tier == nullptr
            ? NvmeMetricsSources{}
            : NvmeMetricsSources{nvme_tier->service.get(), nvme_tier->store.get()});
    if (!m.ok()) {
      LOG(ERROR) << m.status();
      return 1;
    }
    metrics = *std::move(m);
    LOG(INFO) << "metrics listening on port " << metrics->port;
  }

  LOG(INFO) << "memvirtd " << MEMVIRT_VERSION << " serving on " << FLAGS_socket << " ("
            << options->gpus.size() << " configured GPU(s), reserve " << options->reserve_bytes
            << " bytes)";
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s\nMAINPID=%d", FLAGS_socket.c_str(), getpid());

  uint64_t watchdog_usec = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_usec) > 0 && watchdog_usec > 0;
  const absl::Duration watchdog_period = absl::Microseconds(watchdog_usec / 2);
  absl::Time next_ping = absl::Now();
  while (true) {
    pollfd wake = {g_wake_fd, POLLIN, 0};
    (void)poll(&wake, 1, FLAGS_tick_ms);
    if (const int sig = g_signal.load(); sig != 0) {
      LOG(INFO) << "received " << strsignal(sig) << ", shutting down";
      break;
    }
    node.Tick();
    if (watchdog && absl::Now() >= next_ping) {
      sd_notify(0, "WATCHDOG=1");
      next_ping = absl::Now() + watchdog_period;
    }
  }

  sd_notify(0, "STOPPING=1");
  health->SetServingStatus(false);
  metrics.reset();  // it reads the NVMe tier
  nvme_tier.reset();
  listener.Stop();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(FLAGS_shutdown_timeout_ms)));
  server->Wait();
  LOG(INFO) << "memvirtd stopped (" << node.client_count() << " client(s) were connected)";
  return 0;
}

}  // namespace
}  // namespace memvirt::daemon

int main(int argc, char** argv) {
  memvirt::daemon::NormalizeFlagDashes(argc, argv);
  gflags::SetUsageMessage("memvirtd [flags]: memvirt node daemon (see docs/operations.md)");
  gflags::SetVersionString(MEMVIRT_VERSION);
  gflags::SetCommandLineOptionWithMode("logtostderr", "true", gflags::SET_FLAGS_DEFAULT);
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  return memvirt::daemon::Run();
}

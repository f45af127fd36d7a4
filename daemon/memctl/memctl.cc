// memctl: command-line client of memvirtd. See `memctl --help` and docs/operations.md.
//
// Exit codes: 0 success; 1 the daemon refused or failed the request; 2 usage error;
// 3 the daemon is not reachable. `memctl health` exits 0 only when the daemon is SERVING.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/size_parse.h"
#include "daemon/memctl/status_format.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "memvirt/v1/memvirt.grpc.pb.h"

namespace memvirt::memctl {
namespace {

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr int kUnreachable = 3;

constexpr char kUsageText[] =
    "usage: memctl [--socket PATH] [--timeout SECONDS] COMMAND [ARGS]\n"
    "commands:\n"
    "  status [--json] [--no-headers]   GPUs and processes (resident, host, NVMe, budget, rates)\n"
    "  client PID [--json]              detail of one registered process\n"
    "  set-quota PID GPU_UUID SIZE      cap a process's HBM budget (SIZE: 4G, 512M, 0 = none)\n"
    "  drain GPU_UUID [--undo]          move every process off a GPU (or give it back)\n"
    "  health                           exit 0 only if the daemon is SERVING\n"
    "  version                          print the memctl version\n"
    "socket: --socket, else $MEMVIRT_SOCKET, else /run/memvirt/memvirtd.sock\n";

struct Options {
  std::string socket;
  int timeout_seconds = 5;
  std::string command;
  std::vector<std::string> args;
  bool json = false;
  bool headers = true;
  bool undo = false;
};

int UsageError(const std::string& message) {
  std::cerr << "memctl: " << message << "\n" << kUsageText;
  return kUsage;
}

class Connection {
 public:
  explicit Connection(const Options& o) : options_(o) {
    channel_ = grpc::CreateChannel("unix:" + o.socket, grpc::InsecureChannelCredentials());
  }
  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::seconds(options_.timeout_seconds));
  }
  // Maps a failed call to a message and exit code.
  int Fail(const grpc::Status& s) const {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      std::cerr << "memctl: cannot reach memvirtd at " << options_.socket << ": "
                << s.error_message() << " (is memvirtd running?)\n";
      return kUnreachable;
    }
    std::cerr << "memctl: " << StatusName(s.error_code()) << ": " << s.error_message() << "\n";
    return kFailed;
  }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  static const char* StatusName(grpc::StatusCode c) {
    switch (c) {
      case grpc::StatusCode::INVALID_ARGUMENT:
        return "invalid argument";
      case grpc::StatusCode::PERMISSION_DENIED:
        return "permission denied";
      case grpc::StatusCode::NOT_FOUND:
        return "not found";
      case grpc::StatusCode::UNAUTHENTICATED:
        return "unauthenticated";
      default:
        return "error";
    }
  }
  const Options& options_;
  std::shared_ptr<grpc::Channel> channel_;
};

int Status(const Options& o, const Connection& conn) {
  if (!o.args.empty()) return UsageError("status takes no arguments");
  auto stub = v1::OperatorService::NewStub(conn.channel());
  grpc::ClientContext ctx;
  conn.Prepare(&ctx);
  v1::StatusResponse resp;
  grpc::Status s = stub->GetStatus(&ctx, v1::StatusRequest(), &resp);
  if (!s.ok()) return conn.Fail(s);
  std::cout << (o.json ? FormatStatusJson(resp) : FormatStatusTable(resp, o.headers));
  return kOk;
}

bool ParsePid(const std::string& text, uint32_t* pid) {
  return absl::SimpleAtoi(text, pid) && *pid > 0;
}

int Client(const Options& o, const Connection& conn) {
  uint32_t pid = 0;
  if (o.args.size() != 1 || !ParsePid(o.args[0], &pid)) return UsageError("client PID");
  auto stub = v1::OperatorService::NewStub(conn.channel());
  grpc::ClientContext ctx;
  conn.Prepare(&ctx);
  v1::GetClientRequest req;
  req.set_pid(pid);
  v1::ClientDetail resp;
  grpc::Status s = stub->GetClient(&ctx, req, &resp);
  if (!s.ok()) return conn.Fail(s);
  std::cout << (o.json ? FormatClientJson(resp) : FormatClientText(resp));
  return kOk;
}

int SetQuota(const Options& o, const Connection& conn) {
  uint32_t pid = 0;
  if (o.args.size() != 3 || !ParsePid(o.args[0], &pid)) {
    return UsageError("set-quota PID GPU_UUID SIZE");
  }
  uint64_t bytes = 0;
  if (o.args[2] != "none") {
    absl::StatusOr<uint64_t> parsed = daemon::ParseBytes(o.args[2]);
    if (!parsed.ok()) return UsageError(std::string(parsed.status().message()));
    bytes = *parsed;
  }
  auto stub = v1::OperatorService::NewStub(conn.channel());
  grpc::ClientContext ctx;
  conn.Prepare(&ctx);
  v1::SetQuotaRequest req;
  req.set_pid(pid);
  req.set_gpu_uuid(o.args[1]);
  req.set_quota_bytes(bytes);
  v1::SetQuotaResponse resp;
  grpc::Status s = stub->SetQuota(&ctx, req, &resp);
  if (!s.ok()) return conn.Fail(s);
  std::cout << "pid " << pid << " on " << o.args[1] << ": quota "
            << (bytes == 0 ? "none" : daemon::FormatBytes(bytes)) << ", budget target "
            << daemon::FormatBytes(resp.target_bytes()) << " (" << resp.target_bytes()
            << " bytes)\n";
  return kOk;
}

int Drain(const Options& o, const Connection& conn) {
  if (o.args.size() != 1) return UsageError("drain GPU_UUID [--undo]");
  auto stub = v1::OperatorService::NewStub(conn.channel());
  grpc::ClientContext ctx;
  conn.Prepare(&ctx);
  v1::DrainRequest req;
  req.set_gpu_uuid(o.args[0]);
  req.set_undrain(o.undo);
  v1::DrainResponse resp;
  grpc::Status s = stub->Drain(&ctx, req, &resp);
  if (!s.ok()) return conn.Fail(s);
  std::cout << (o.undo ? "undrained " : "draining ") << o.args[0] << ": " << resp.clients_notified()
            << " process(es) notified\n";
  return kOk;
}

int Health(const Options& o, const Connection& conn) {
  if (!o.args.empty()) return UsageError("health takes no arguments");
  auto stub = grpc::health::v1::Health::NewStub(conn.channel());
  grpc::ClientContext ctx;
  conn.Prepare(&ctx);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp);
  if (!s.ok()) return conn.Fail(s);
  const bool serving = resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return serving ? kOk : kFailed;
}

int Main(int argc, char** argv) {
  Options o;
  if (const char* env = std::getenv("MEMVIRT_SOCKET"); env != nullptr && *env != '\0') {
    o.socket = env;
  } else {
    o.socket = "/run/memvirt/memvirtd.sock";
  }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& flag) -> const char* {
      if (a.rfind(flag + "=", 0) == 0) return argv[i] + flag.size() + 1;
      if (a == flag && i + 1 < argc) return argv[++i];
      return nullptr;
    };
    if (a == "-h" || a == "--help" || a == "help") {
      std::cout << kUsageText;
      return kOk;
    } else if (const char* v = value("--socket")) {
      o.socket = v;
    } else if (const char* t = value("--timeout")) {
      if (!absl::SimpleAtoi(t, &o.timeout_seconds) || o.timeout_seconds <= 0) {
        return UsageError("bad --timeout");
      }
    } else if (a == "--json") {
      o.json = true;
    } else if (a == "--no-headers") {
      o.headers = false;
    } else if (a == "--undo") {
      o.undo = true;
    } else if (a.size() > 1 && a[0] == '-' && !std::isdigit(static_cast<unsigned char>(a[1]))) {
      return UsageError("unknown option " + a);
    } else if (o.command.empty()) {
      o.command = a;
    } else {
      o.args.push_back(a);
    }
  }
  if (o.command.empty()) return UsageError("no command");
  if (o.command == "version") {
    std::cout << "memctl " << MEMVIRT_VERSION << " (protocol memvirt.v1)\n";
    return kOk;
  }
  static const char* const kCommands[] = {"status", "client", "set-quota", "drain", "health"};
  if (std::find(std::begin(kCommands), std::end(kCommands), o.command) == std::end(kCommands)) {
    return UsageError("unknown command " + o.command);
  }
  struct stat st;
  if (stat(o.socket.c_str(), &st) != 0) {
    std::cerr << "memctl: memvirtd is not running (no socket at " << o.socket
              << "; start it with `systemctl start memvirtd` or pass --socket)\n";
    return kUnreachable;
  }
  Connection conn(o);
  if (o.command == "status") return Status(o, conn);
  if (o.command == "client") return Client(o, conn);
  if (o.command == "set-quota") return SetQuota(o, conn);
  if (o.command == "drain") return Drain(o, conn);
  if (o.command == "health") return Health(o, conn);
  return UsageError("unknown command " + o.command);
}

}  // namespace
}  // namespace memvirt::memctl

int main(int argc, char** argv) { return memvirt::memctl::Main(argc, argv); }

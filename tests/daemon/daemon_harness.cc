#include "tests/daemon/daemon_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "google/protobuf/util/json_util.h"
#include "tests/daemon/page_pattern.h"

extern char** environ;  // NOLINT: POSIX

namespace memvirt::testing {

std::string MemvirtdPath() { return MEMVIRT_MEMVIRTD_PATH; }
std::string MemctlPath() { return MEMVIRT_MEMCTL_PATH; }
std::string TestClientPath() { return MEMVIRT_TEST_CLIENT_PATH; }

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::unique_ptr<Subprocess> Subprocess::Spawn(const std::vector<std::string>& argv,
                                              const std::string& log_prefix,
                                              const std::vector<std::string>& env) {
  auto p = std::unique_ptr<Subprocess>(new Subprocess());
  p->out_path_ = log_prefix + ".out";
  p->err_path_ = log_prefix + ".err";
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // posix_spawn, not fork: the test process is multithreaded (gRPC), and a forked child of a
  // multithreaded process may only call async-signal-safe functions before exec.
  std::vector<std::string> env_storage = env;  // Entries of `env` replace inherited ones.
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& mine : env) replaced |= mine.rfind(name + "=", 0) == 0;
    if (!replaced) env_storage.push_back(entry);
  }
  std::vector<char*> envp;
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, p->out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, p->err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  p->pid_ = pid;
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

void Subprocess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return 127;  // Never started.
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!reaped_) {
    const pid_t r = waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= end) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return Decode(status_);
}

bool Subprocess::Running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }
std::string Subprocess::Stdout() const { return ReadFile(out_path_); }
std::string Subprocess::Stderr() const { return ReadFile(err_path_); }

CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  static int counter = 0;
  const std::string prefix =
      "/tmp/memvirt-test-run-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  std::unique_ptr<Subprocess> p = Subprocess::Spawn(argv, prefix, env);
  CommandResult r;
  std::optional<int> code = p->Wait(std::chrono::seconds(10));
  r.exit_code = code.value_or(-1);
  r.out = p->Stdout();
  r.err = p->Stderr();
  unlink((prefix + ".out").c_str());
  unlink((prefix + ".err").c_str());
  return r;
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/memvirt-daemon-test-XXXXXX";
  path_ = mkdtemp(tmpl);
  chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Daemon::Daemon(const std::string& dir, std::vector<std::string> flags, std::vector<std::string> env)
    : dir_(dir), socket_(dir + "/memvirtd.sock"), flags_(std::move(flags)), env_(std::move(env)) {}

bool Daemon::Start() {
  std::vector<std::string> argv = {MemvirtdPath(), "--socket=" + socket_};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  process_ = Subprocess::Spawn(argv, dir_ + "/memvirtd." + std::to_string(starts_++), env_);
  return WaitUntil([&] { return Memctl({"health"}).exit_code == 0 || !process_->Running(); },
                   std::chrono::seconds(10)) &&
         process_->Running();
}

CommandResult Daemon::Memctl(const std::vector<std::string>& args,
                             const std::vector<std::string>& prefix) const {
  std::vector<std::string> argv = prefix;
  argv.push_back(MemctlPath());
  argv.push_back("--socket=" + socket_);
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

std::optional<google::protobuf::Struct> Daemon::StatusJson(
    const std::vector<std::string>& prefix) const {
  CommandResult r = Memctl({"status", "--json"}, prefix);
  if (r.exit_code != 0) return std::nullopt;
  google::protobuf::Struct s;
  if (!google::protobuf::util::JsonStringToMessage(r.out, &s).ok()) return std::nullopt;
  return s;
}

std::unique_ptr<Subprocess> Daemon::StartClient(const std::vector<std::string>& args,
                                                const std::vector<std::string>& prefix) {
  std::vector<std::string> argv = prefix;
  argv.push_back(TestClientPath());
  argv.push_back("--socket=" + socket_);
  argv.insert(argv.end(), args.begin(), args.end());
  return Subprocess::Spawn(argv, dir_ + "/client." + std::to_string(clients_++));
}

const google::protobuf::ListValue& Processes(const google::protobuf::Struct& status) {
  return status.fields().at("processes").list_value();
}

const google::protobuf::Struct* FindProcess(const google::protobuf::Struct& status, pid_t pid) {
  for (const google::protobuf::Value& v : Processes(status).values()) {
    if (static_cast<pid_t>(Field(v.struct_value(), "pid")) == pid) return &v.struct_value();
  }
  return nullptr;
}

double Field(const google::protobuf::Struct& s, const std::string& name) {
  auto it = s.fields().find(name);
  return it == s.fields().end() ? -1 : it->second.number_value();
}

const google::protobuf::Struct& FirstGpu(const google::protobuf::Struct& process) {
  auto it = process.fields().find("gpus");
  if (it == process.fields().end() || it->second.list_value().values_size() == 0) {
    return google::protobuf::Struct::default_instance();
  }
  return it->second.list_value().values(0).struct_value();
}

HeldAsNobody::HeldAsNobody(const std::function<char()>& body) {
  int ready[2], release[2];
  if (pipe(ready) != 0) return;
  if (pipe(release) != 0) {
    close(ready[0]);
    close(ready[1]);
    return;
  }
  pid_ = fork();
  if (pid_ == 0) {
    close(ready[0]);
    close(release[1]);
    if (setgid(kNobody) != 0 || setuid(kNobody) != 0) _exit(2);
    const char result = body();
    if (write(ready[1], &result, 1) != 1) _exit(3);
    char byte;
    (void)!read(release[0], &byte, 1);
    _exit(0);
  }
  close(ready[1]);
  close(release[0]);
  ready_ = ready[0];
  release_ = release[1];
}

std::optional<char> HeldAsNobody::Result() {
  char result;
  if (ready_ < 0 || read(ready_, &result, 1) != 1) return std::nullopt;
  return result;
}

bool HeldAsNobody::Release() {
  if (release_ >= 0) close(release_);
  if (ready_ >= 0) close(ready_);
  release_ = ready_ = -1;
  if (pid_ > 0) {
    int status = 0;
    clean_ = waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    pid_ = -1;
  }
  return clean_;
}

std::vector<std::string> AsNobody() {
  for (const char* p : {"/usr/bin/setpriv", "/bin/setpriv"}) {
    if (access(p, X_OK) == 0) {
      return {p, "--reuid=65534", "--regid=65534", "--clear-groups"};
    }
  }
  return {};
}

std::string Flag(const std::string& name, uint64_t v) {
  return "--" + name + "=" + std::to_string(v);
}

std::string ExpectedChecksum(int pages, int iterations) {
  // Replays the client's write schedule: iteration `it` writes pages (7it) and (7it + 13).
  std::vector<int> last(pages, -1);
  for (int it = 0; it < iterations; ++it) {
    for (int k = 0; k < 2; ++k) last[(it * 7 + k * 13) % pages] = it;
  }
  uint64_t h = kFnvOffset;
  std::vector<uint8_t> data;
  for (int p = 0; p < pages; ++p) {
    data.clear();
    if (last[p] >= 0) FillPage(p, last[p], data);
    h = Fnv1a(data, h);
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, h);
  return buf;
}

std::string WorkloadChecksum(const std::string& out) {
  const size_t at = out.find("checksum ");
  if (at == std::string::npos) return "";
  return out.substr(at + 9, out.find_first_of(" \n", at + 9) - (at + 9));
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const timeval timeout = {5, 0};  // a scrape that waits longer counts as failed
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

int MetricsPort(Daemon& d) {
  const std::string log = d.process().Stderr();
  const std::string marker = "metrics listening on port ";
  const size_t at = log.find(marker);
  return at == std::string::npos ? 0 : std::atoi(log.c_str() + at + marker.size());
}

std::optional<double> MetricValue(const std::string& body, const std::string& name) {
  const std::string line_start = "\n" + name + " ";
  const size_t at = body.find(line_start);
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(body.c_str() + at + line_start.size(), nullptr);
}

}  // namespace memvirt::testing

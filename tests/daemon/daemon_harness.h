// Test harness: real memvirtd, memctl and memvirt-test-client processes on a temp socket.
//
// Thread safety: a harness object belongs to one test thread.
#ifndef MEMVIRT_TESTS_DAEMON_DAEMON_HARNESS_H_
#define MEMVIRT_TESTS_DAEMON_DAEMON_HARNESS_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"

namespace memvirt::testing {

// Paths of the binaries under test (compiled in by tests/daemon/CMakeLists.txt).
std::string MemvirtdPath();
std::string MemctlPath();
std::string TestClientPath();

// A child process with stdout and stderr redirected to files.
class Subprocess {
 public:
  // `env` entries "NAME=value" are added to the environment.
  static std::unique_ptr<Subprocess> Spawn(const std::vector<std::string>& argv,
                                           const std::string& log_prefix,
                                           const std::vector<std::string>& env = {});
  ~Subprocess();  // SIGKILLs and reaps the process if still running.

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Exit code, or 128 + signal; nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();
  std::string Stdout() const;
  std::string Stderr() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_path_;
  std::string err_path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs a command to completion (10 s limit).
CommandResult Run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});

// Polls `pred` every 10 ms until it holds or `timeout` passes.
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// A fresh directory (mode 0755, so other uids can reach the socket) removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A memvirtd on `dir`/memvirtd.sock.
class Daemon {
 public:
  Daemon(const std::string& dir, std::vector<std::string> flags, std::vector<std::string> env = {});
  // Starts (or restarts) the daemon and waits until `memctl health` says SERVING.
  bool Start();
  void Kill(int sig) { process_->Signal(sig); }
  std::optional<int> Wait(std::chrono::milliseconds t) { return process_->Wait(t); }
  const std::string& socket() const { return socket_; }
  Subprocess& process() { return *process_; }

  CommandResult Memctl(const std::vector<std::string>& args,
                       const std::vector<std::string>& prefix = {}) const;
  // `memctl status --json`, parsed; nullopt if memctl failed or printed bad JSON.
  std::optional<google::protobuf::Struct> StatusJson(
      const std::vector<std::string>& prefix = {}) const;
  std::unique_ptr<Subprocess> StartClient(const std::vector<std::string>& args,
                                          const std::vector<std::string>& prefix = {});

 private:
  std::string dir_;
  std::string socket_;
  std::vector<std::string> flags_;
  std::vector<std::string> env_;
  std::unique_ptr<Subprocess> process_;
  int starts_ = 0;
  int clients_ = 0;
};

// Helpers over the parsed status JSON.
const google::protobuf::ListValue& Processes(const google::protobuf::Struct& status);
// The process entry with `pid`, or nullptr.
const google::protobuf::Struct* FindProcess(const google::protobuf::Struct& status, pid_t pid);
double Field(const google::protobuf::Struct& s, const std::string& name);
// gpus[0] of a process entry, or an empty Struct (every Field() -1) while the
// process has no GPU entry yet (a status taken between its registration and
// its first GPU report).
const google::protobuf::Struct& FirstGpu(const google::protobuf::Struct& process);

// Runs `body` in a forked child as nobody:nogroup (uid and gid 65534). The child reports the
// byte `body` returns, then keeps everything it opened until Release() (or destruction).
// REQUIRES root; `body` must only use async-signal-safe calls and plain system calls.
class HeldAsNobody {
 public:
  static constexpr gid_t kNobody = 65534;
  explicit HeldAsNobody(const std::function<char()>& body);
  ~HeldAsNobody() { Release(); }
  HeldAsNobody(const HeldAsNobody&) = delete;
  HeldAsNobody& operator=(const HeldAsNobody&) = delete;
  // The byte `body` returned; nullopt if the child failed to run it.
  std::optional<char> Result();
  // Lets the child exit and reaps it; true if it exited cleanly. Idempotent.
  bool Release();

 private:
  pid_t pid_ = -1;
  int ready_ = -1;    // read end: the child's result
  int release_ = -1;  // write end: closed to let the child go
  bool clean_ = false;
};

// The command prefix that runs a program as nobody:nogroup, or empty if setpriv is missing.
std::vector<std::string> AsNobody();

// "--name=v".
std::string Flag(const std::string& name, uint64_t v);

// Checksum the test client prints for --pages/--iterations (see test_client.cc).
std::string ExpectedChecksum(int pages, int iterations);

// The hex digits after "checksum " in tests/shim/train_workload.cc's output, or "" if absent.
std::string WorkloadChecksum(const std::string& out);

// The body of an HTTP/1.0 GET of `path` from 127.0.0.1:`port` (with headers), or "" when the
// connection fails; a reply slower than 5 s is cut off.
std::string HttpGet(int port, const std::string& path);

// The port a daemon started with --metrics-listen logged, or 0.
int MetricsPort(Daemon& d);

// The value of the unlabelled Prometheus sample `name` in `body`, or nullopt.
std::optional<double> MetricValue(const std::string& body, const std::string& name);

}  // namespace memvirt::testing

#endif  // MEMVIRT_TESTS_DAEMON_DAEMON_HARNESS_H_

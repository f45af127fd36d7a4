// Client library without a daemon: it reports "disconnected" promptly so the caller can run
// standalone, and every call stays safe. With a daemon: tests/daemon/.
#include "memvirt/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace memvirt::client {
namespace {

Options NoDaemon() {
  Options o;
  o.socket_path = "/nonexistent/memvirt/memvirtd.sock";
  o.gpus.push_back({"GPU-test", 1 << 30, 0, 0});
  o.initial_backoff = std::chrono::milliseconds(5);
  o.max_backoff = std::chrono::milliseconds(20);
  return o;
}

TEST(ClientTest, ReportsDisconnectedWhenDaemonIsAbsent) {
  std::atomic<int> disconnected{0};
  Options o = NoDaemon();
  o.on_state = [&](State s) {
    if (s == State::kDisconnected) ++disconnected;
  };
  auto c = Client::Start(o);
  EXPECT_FALSE(c->WaitConnected(std::chrono::milliseconds(100)));
  EXPECT_EQ(c->state(), State::kDisconnected);
  EXPECT_EQ(disconnected.load(), 1) << "reported once, not on every retry";
  EXPECT_FALSE(c->Budget("GPU-test").has_value());
  EXPECT_EQ(c->daemon_pid(), 0);
  EXPECT_EQ(c->registrations(), 0u);
  // Calls while disconnected are dropped, never block or crash.
  HintBatch b;
  b.usage.push_back({.gpu_uuid = "GPU-test", .resident_bytes = 1});
  c->SendHints(b);
  c->Ack(1, true, std::nullopt);
  Directive d;
  EXPECT_FALSE(c->PollDirective(&d));
  c->Close();
  c->Close();
  EXPECT_EQ(c->state(), State::kClosed);
}

// A listening socket that counts the connections made to it (nothing is answered).
class CountingListener {
 public:
  explicit CountingListener(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
          listen(fd_, 8) == 0;
  }
  ~CountingListener() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  // True once a connection arrives within `timeout`.
  bool AcceptWithin(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
    const int conn = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return false;
    close(conn);
    return true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

std::string TempSocketPath(const char* name) {
  return "/tmp/memvirt_client_test_" + std::to_string(getpid()) + "_" + name + ".sock";
}

// The environment is changed only while no client (no client thread) exists.
TEST(ClientTest, DefaultSocketComesFromEnvironment) {
  CountingListener listener(TempSocketPath("env"));
  ASSERT_TRUE(listener.ok());
  ASSERT_EQ(setenv("MEMSHIM_DAEMON_SOCKET", TempSocketPath("env").c_str(), 1), 0);
  Options o = NoDaemon();
  o.socket_path.clear();
  auto c = Client::Start(o);
  EXPECT_TRUE(listener.AcceptWithin(std::chrono::seconds(30)))
      << "the client did not connect to the socket the environment names";
  c->Close();
  c.reset();
  unsetenv("MEMSHIM_DAEMON_SOCKET");
}

TEST(ClientTest, ExplicitSocketPathWinsOverEnvironment) {
  CountingListener named(TempSocketPath("named"));
  CountingListener from_env(TempSocketPath("from_env"));
  ASSERT_TRUE(named.ok() && from_env.ok());
  ASSERT_EQ(setenv("MEMSHIM_DAEMON_SOCKET", TempSocketPath("from_env").c_str(), 1), 0);
  Options o = NoDaemon();
  o.socket_path = TempSocketPath("named");
  auto c = Client::Start(o);
  EXPECT_TRUE(named.AcceptWithin(std::chrono::seconds(30)));
  c->Close();
  c.reset();
  unsetenv("MEMSHIM_DAEMON_SOCKET");
  EXPECT_FALSE(from_env.AcceptWithin(std::chrono::milliseconds(0)));  // closed: no later attempt
}

TEST(ClientTest, DestructorStopsBackgroundThread) {
  for (int i = 0; i < 20; ++i) {
    auto c = Client::Start(NoDaemon());
  }  // Each destructor joins; a leaked thread would crash or hang the test.
  SUCCEED();
}

}  // namespace
}  // namespace memvirt::client

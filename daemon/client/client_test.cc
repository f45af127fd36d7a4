// Client library without a daemon: it reports "disconnected" promptly so the caller can run
// standalone, and every call stays safe. With a daemon: tests/daemon/.
#include "memvirt/client.h"

#include <atomic>
#include <chrono>
#include <thread>

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

TEST(ClientTest, DefaultSocketComesFromEnvironment) {
  setenv("MEMSHIM_DAEMON_SOCKET", "/nonexistent/other.sock", 1);
  Options o = NoDaemon();
  o.socket_path.clear();
  auto c = Client::Start(o);
  EXPECT_FALSE(c->WaitConnected(std::chrono::milliseconds(50)));
  unsetenv("MEMSHIM_DAEMON_SOCKET");
  EXPECT_STREQ(StateName(c->state()), "disconnected");
}

TEST(ClientTest, DestructorStopsBackgroundThread) {
  for (int i = 0; i < 20; ++i) {
    auto c = Client::Start(NoDaemon());
  }  // Each destructor joins; a leaked thread would crash or hang the test.
  SUCCEED();
}

}  // namespace
}  // namespace memvirt::client

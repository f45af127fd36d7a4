// The IPC handle layout and the socket transport of ipc_channel.h.
#include "shim/core/ipc_channel.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace memvirt::shim {
namespace {

TEST(IpcChannelTest, HandlesRoundTripAndDriverHandlesAreNotTakenForShimHandles) {
  ShimIpcHandle h = {};
  std::memcpy(h.magic, kShimIpcMagic, sizeof(h.magic));
  h.version = kShimIpcVersion;
  h.pid = 4242;
  h.listener = 0x0123456789abcdefull;
  h.export_id = 7;
  h.token = 99;
  h.offset = 4096;
  h.bytes = 3 << 20;
  h.chunks = 2;
  CUipcMemHandle wire;
  EncodeIpcHandle(h, &wire);
  ShimIpcHandle back;
  ASSERT_TRUE(DecodeIpcHandle(wire, &back));
  EXPECT_EQ(std::memcmp(&back, &h, sizeof(h)), 0);

  CUipcMemHandle driver = {};
  std::memset(driver.reserved, 0x5a, sizeof(driver.reserved));
  EXPECT_FALSE(DecodeIpcHandle(driver, &back));
  wire.reserved[offsetof(ShimIpcHandle, version)] ^= 1;  // another layout version
  EXPECT_FALSE(DecodeIpcHandle(wire, &back));
}

// Descriptors sent with a message arrive as descriptors of the same files.
TEST(IpcChannelTest, DescriptorsTravelWithTheirMessageUpToTheBatchLimit) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair), 0);
  std::vector<int> pipes;
  for (size_t i = 0; i < kIpcFdsPerMessage; ++i) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    const char tag = static_cast<char>('a' + i % 26);
    ASSERT_EQ(write(p[1], &tag, 1), 1);
    close(p[1]);
    pipes.push_back(p[0]);
  }
  const uint32_t count = static_cast<uint32_t>(pipes.size());
  ASSERT_TRUE(SendWithFds(pair[0], &count, sizeof(count), pipes.data(), pipes.size()));
  std::vector<int> too_many(kIpcFdsPerMessage + 1, pipes[0]);
  EXPECT_FALSE(SendWithFds(pair[0], &count, sizeof(count), too_many.data(), too_many.size()));
  uint32_t got_count = 0;
  std::vector<int> got;
  ASSERT_TRUE(ReceiveWithFds(pair[1], &got_count, sizeof(got_count), &got));
  EXPECT_EQ(got_count, count);
  ASSERT_EQ(got.size(), pipes.size());
  for (size_t i = 0; i < got.size(); ++i) {
    char tag = 0;
    ASSERT_EQ(read(got[i], &tag, 1), 1);
    EXPECT_EQ(tag, static_cast<char>('a' + i % 26)) << i;
    close(got[i]);
    close(pipes[i]);
  }
  // A message of another size is refused, and a closed peer reads as the end.
  uint64_t wrong = 0;
  ASSERT_TRUE(SendWithFds(pair[0], &wrong, sizeof(wrong), nullptr, 0));
  EXPECT_FALSE(ReceiveWithFds(pair[1], &got_count, sizeof(got_count), &got));
  close(pair[0]);
  EXPECT_FALSE(ReceiveWithFds(pair[1], &got_count, sizeof(got_count), &got));
  close(pair[1]);
}

TEST(IpcChannelTest, AbstractSocketsConnectOnlyByTheirNameAndSeeTheSameUser) {
  const std::string name = IpcSocketName(static_cast<uint32_t>(getpid()), 0x5eed);
  EXPECT_EQ(ConnectIpc(name), -1);  // nothing listens yet
  const int listener = ListenIpc(name);
  ASSERT_GE(listener, 0);
  EXPECT_EQ(ListenIpc(name), -1);  // the name is taken
  const int client = ConnectIpc(name);
  ASSERT_GE(client, 0);
  const int served = accept(listener, nullptr, nullptr);
  ASSERT_GE(served, 0);
  EXPECT_TRUE(PeerIsSameUser(served));
  EXPECT_EQ(ConnectIpc(IpcSocketName(static_cast<uint32_t>(getpid()), 0x5eee)), -1);
  close(served);
  close(client);
  close(listener);
}

}  // namespace
}  // namespace memvirt::shim

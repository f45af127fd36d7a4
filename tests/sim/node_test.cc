// MEMSIM_NODE: processes with the same node name share one device's capacity, and the usage of
// a process that dies (even by SIGKILL) is reclaimed. Also: behaviour before cuInit.
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kCapacity = 64u << 20;

std::string NodeName() { return "test-node-" + std::to_string(getpid()); }

// The node segment outlives the tests of this process (its driver keeps it mapped); it is
// removed when the process exits.
struct RemoveNodeSegmentAtExit {
  ~RemoveNodeSegmentAtExit() { shm_unlink(("/memsim-" + NodeName()).c_str()); }
} remove_node_segment_at_exit;

// Runs the probe with args; returns its exit status.
int RunProbe(const std::string& args) {
  const std::string cmd = std::string(MEMSIM_PROBE_PATH) + " " + args;
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// A probe that keeps `bytes` allocated until Stop() (or until it is killed).
class Holder {
 public:
  explicit Holder(size_t bytes) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    const std::string b = std::to_string(bytes);  // before fork: the child only execs
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      close(in[1]);
      close(out[0]);
      execl(MEMSIM_PROBE_PATH, MEMSIM_PROBE_PATH, "hold", b.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_child_ = in[1];
    char buf[8] = {};
    ssize_t n = read(out[0], buf, sizeof(buf) - 1);
    close(out[0]);
    reply_ = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  ~Holder() { Stop(); }
  const std::string& reply() const { return reply_; }
  void Stop() {
    if (pid_ <= 0) return;
    close(to_child_);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    close(to_child_);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  std::string reply_;
};

class SimNodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("MEMSIM_NODE", NodeName().c_str(), 1);
    setenv("MEMSIM_DEVICE_MEMORY", "64M", 1);
    ASSERT_CU(cuInit(0));
    ASSERT_CU(cuCtxCreate(&ctx_, nullptr, 0, 0));
  }
  void TearDown() override { cuCtxDestroy(ctx_); }
  size_t FreeBytes() {
    size_t free = 0, total = 0;
    EXPECT_CU(cuMemGetInfo(&free, &total));
    EXPECT_EQ(total, kCapacity);
    return free;
  }
  CUcontext ctx_ = nullptr;
};

TEST(SimBeforeInit, CallsFailWithNotInitialized) { EXPECT_EQ(RunProbe("uninit"), 0); }

TEST_F(SimNodeTest, SecondProcessIsOutOfMemoryWhileTheFirstHoldsCapacity) {
  CUdeviceptr mine;
  ASSERT_CU(cuMemAlloc(&mine, 40u << 20));
  EXPECT_EQ(RunProbe("alloc " + std::to_string(32u << 20)), 2);  // 40 + 32 > 64
  EXPECT_EQ(RunProbe("alloc " + std::to_string(16u << 20)), 0);  // 40 + 16 fits
  ASSERT_CU(cuMemFree(mine));
  EXPECT_EQ(RunProbe("alloc " + std::to_string(32u << 20)), 0);
}

TEST_F(SimNodeTest, OtherProcessesUsageIsVisibleInMemGetInfo) {
  const size_t before = FreeBytes();
  Holder holder(24u << 20);
  ASSERT_EQ(holder.reply(), "ok\n");
  EXPECT_EQ(FreeBytes(), before - (24u << 20));
  holder.Stop();  // a normal exit gives the capacity back
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(SimNodeTest, CapacityOfAKilledProcessIsReclaimed) {
  Holder holder(48u << 20);
  ASSERT_EQ(holder.reply(), "ok\n");
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc(&p, 32u << 20), CUDA_ERROR_OUT_OF_MEMORY);
  holder.Kill();  // SIGKILL: no chance to clean up
  ASSERT_CU(cuMemAlloc(&p, 32u << 20));
  ASSERT_CU(cuMemFree(p));
}

TEST_F(SimNodeTest, UuidsAreStableAcrossProcessesOfTheSameNode) {
  CUuuid u;
  ASSERT_CU(cuDeviceGetUuid(&u, 0));
  char mine[40] = {};
  for (int i = 0; i < 16; ++i) {
    std::snprintf(mine + 2 * i, 3, "%02x", static_cast<unsigned char>(u.bytes[i]));
  }
  const std::string cmd = std::string(MEMSIM_PROBE_PATH) + " uuid";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char theirs[64] = {};
  ASSERT_NE(fgets(theirs, sizeof(theirs), f), nullptr);
  pclose(f);
  EXPECT_EQ(std::string(theirs), std::string(mine) + "\n");
}

}  // namespace
}  // namespace memsim_test

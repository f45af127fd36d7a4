// Two processes exchange a device block through legacy IPC (cuIpcGetMemHandle
// / cuIpcOpenMemHandle / cuIpcCloseMemHandle), each paging memory of its own
// meanwhile. Prints "key value" lines for the harness (ipc_test.cc).
//
//   memshim_ipc_exchange exporter BLOCK_BYTES EXPORTER_PRESSURE IMPORTER_PRESSURE
//
// The exporter fills the block (pattern 1), exports it and starts itself as
// the importer (same environment; IPC_IMPORTER_WITHOUT_DISABLE=1 drops
// MEMSHIM_DISABLE for it), passing the handle over a socket pair on fd 3.
// The importer opens it (twice: one address, counted), checks pattern 1,
// writes pattern 2 through a DtoD copy and reports; the exporter checks
// pattern 2 while the importer still has it open, the importer closes it,
// and the exporter pages its own memory again and checks pattern 2 once
// more. Both keep cycling through PRESSURE bytes of other blocks (checked
// by checksum) throughout, so under the shim with a small device budget
// everything else pages while the block is shared.
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"

extern char** environ;

namespace {

constexpr uint64_t kPressureBlock = 4ull << 20;
constexpr int kChannelFd = 3;

uint64_t Fnv(const void* p, size_t bytes) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

std::vector<uint64_t> Pattern(size_t bytes, uint64_t seed) {
  std::vector<uint64_t> v(bytes / 8);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint64_t& w : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w = x;
  }
  return v;
}

uint64_t DeviceChecksum(CUdeviceptr p, size_t bytes) {
  std::vector<uint64_t> host(bytes / 8);
  CHECK_CU(cuMemcpyDtoH(host.data(), p, bytes));
  return Fnv(host.data(), bytes);
}

// Blocks of another tensor set, paged through the device budget.
class Pressure {
 public:
  Pressure(uint64_t bytes, uint64_t seed) : seed_(seed) {
    for (uint64_t done = 0; done < bytes; done += kPressureBlock) {
      CUdeviceptr p;
      CHECK_CU(cuMemAlloc(&p, kPressureBlock));
      const auto data = Pattern(kPressureBlock, seed + blocks_.size());
      CHECK_CU(cuMemcpyHtoD(p, data.data(), kPressureBlock));
      sums_.push_back(Fnv(data.data(), kPressureBlock));
      blocks_.push_back(p);
    }
  }
  // Reads every block (oldest first: each read pages under a small budget);
  // false if one lost its bytes.
  bool Round() {
    bool ok = true;
    for (size_t i = 0; i < blocks_.size(); ++i) {
      ok &= DeviceChecksum(blocks_[i], kPressureBlock) == sums_[i];
    }
    return ok;
  }

 private:
  uint64_t seed_;
  std::vector<CUdeviceptr> blocks_;
  std::vector<uint64_t> sums_;
};

void SendAll(int fd, const void* data, size_t bytes) {
  if (send(fd, data, bytes, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes)) std::exit(4);
}
void ReceiveAll(int fd, void* data, size_t bytes) {
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = recv(fd, static_cast<char*>(data) + got, bytes - got, 0);
    if (n <= 0) std::exit(5);
    got += static_cast<size_t>(n);
  }
}

struct Offer {
  CUipcMemHandle handle;
  uint64_t bytes;
  uint64_t checksum;  // pattern 1
};

pid_t StartImporter(const char* self, int channel, uint64_t pressure) {
  std::vector<std::string> env;
  const bool drop_disable = getenv("IPC_IMPORTER_WITHOUT_DISABLE") != nullptr;
  for (char** e = environ; *e != nullptr; ++e) {
    if (drop_disable && std::strncmp(*e, "MEMSHIM_DISABLE=", 16) == 0) continue;
    env.emplace_back(*e);
  }
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string mode = "importer", bytes = std::to_string(pressure);
  std::string path = self;
  char* argv[] = {path.data(), mode.data(), bytes.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, channel, kChannelFd);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data()) != 0) {
    std::exit(6);
  }
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int RunExporter(const char* self, uint64_t block_bytes, uint64_t pressure_bytes,
                uint64_t importer_pressure) {
  SetUpPrimaryContext();
  Pressure pressure(pressure_bytes, 100);
  CUdeviceptr block;
  CHECK_CU(cuMemAlloc(&block, block_bytes));
  const auto one = Pattern(block_bytes, 1);
  CHECK_CU(cuMemcpyHtoD(block, one.data(), block_bytes));

  Offer offer = {};
  offer.bytes = block_bytes;
  offer.checksum = Fnv(one.data(), block_bytes);
  CHECK_CU(cuIpcGetMemHandle(&offer.handle, block));
  CUipcMemHandle again;
  CHECK_CU(cuIpcGetMemHandle(&again, block));
  std::printf("same_handle %s\n",
              std::memcmp(&again, &offer.handle, sizeof(again)) == 0 ? "yes" : "no");
  CUipcMemHandle interior;
  std::printf("interior_handle %d\n", cuIpcGetMemHandle(&interior, block + 256));
  CUdeviceptr self_open = 0;
  std::printf("self_open %d\n",
              cuIpcOpenMemHandle(&self_open, offer.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  int capable = -1;
  CHECK_CU(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, block));
  std::printf("ipc_capable %d\n", capable);
  // NCCL's user-buffer registration asks for the VMM handle first.
  CUmemGenericAllocationHandle retained = 0;
  std::printf("retain_handle %d\n",
              cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(block)));
  std::fflush(stdout);

  // Everything else pages once before the importer maps the block: were it
  // not pinned, its chunks would now hold other blocks' bytes.
  bool pressure_ok = pressure.Round();
  int channel[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, channel) != 0) return 7;
  const pid_t child = StartImporter(self, channel[1], importer_pressure);
  close(channel[1]);
  SendAll(channel[0], &offer, sizeof(offer));

  pressure_ok &= pressure.Round();
  uint64_t written = 0;  // pattern 2, written by the importer through its mapping
  ReceiveAll(channel[0], &written, sizeof(written));
  pressure_ok &= pressure.Round();
  std::printf("exporter_sees_write %s\n",
              DeviceChecksum(block, block_bytes) == written ? "ok" : "MISMATCH");
  std::fflush(stdout);  // before the importer may close (the harness orders lines)
  const char verified = 'v';
  SendAll(channel[0], &verified, 1);
  char closed = 0;
  ReceiveAll(channel[0], &closed, 1);  // the importer closed the handle
  int status = 0;
  waitpid(child, &status, 0);
  std::printf("importer_exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);

  // Unpinned now: the block pages like any other and keeps its bytes.
  pressure_ok &= pressure.Round();
  pressure_ok &= pressure.Round();
  std::printf("after_close %s\n",
              DeviceChecksum(block, block_bytes) == written ? "ok" : "MISMATCH");
  std::printf("exporter_pressure %s\n", pressure_ok ? "ok" : "MISMATCH");
  CHECK_CU(cuMemFree(block));
  return 0;
}

int RunImporter(uint64_t pressure_bytes) {
  SetUpPrimaryContext();
  Pressure pressure(pressure_bytes, 1000);
  Offer offer;
  ReceiveAll(kChannelFd, &offer, sizeof(offer));
  // Malformed handles (under the shim: the shim's layout, 8-byte words from byte 8 on: pid and
  // version, listener, export id, token, offset, bytes, chunks) fail cleanly.
  const auto bad_open = [&offer](size_t word, uint64_t flip) {
    CUipcMemHandle bad = offer.handle;
    uint64_t v;
    std::memcpy(&v, bad.reserved + 8 * word, 8);
    v ^= flip;
    std::memcpy(bad.reserved + 8 * word, &v, 8);
    CUdeviceptr p = 0;
    return static_cast<int>(cuIpcOpenMemHandle(&p, bad, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  };
  if (std::memcmp(offer.handle.reserved, "memvIPC", 7) == 0) {
    std::printf("importer_bad_listener %d\n", bad_open(2, 1));
    std::printf("importer_bad_token %d\n", bad_open(4, 1));
    std::printf("importer_bad_bytes %d\n", bad_open(6, ~0ull));
  }
  CUdeviceptr mapped = 0, mapped_again = 0;
  const CUresult opened =
      cuIpcOpenMemHandle(&mapped, offer.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  std::printf("importer_open %d\n", opened);
  if (opened != CUDA_SUCCESS) return 1;
  CHECK_CU(cuIpcOpenMemHandle(&mapped_again, offer.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  std::printf("importer_reopen_same %s\n", mapped_again == mapped ? "yes" : "no");
  bool pressure_ok = pressure.Round();
  std::printf("importer_reads %s\n",
              DeviceChecksum(mapped, offer.bytes) == offer.checksum ? "ok" : "MISMATCH");

  // Pattern 2 goes in through a block of the importer's own (paged) memory.
  CUdeviceptr staging;
  CHECK_CU(cuMemAlloc(&staging, offer.bytes));
  const auto two = Pattern(offer.bytes, 2);
  CHECK_CU(cuMemcpyHtoD(staging, two.data(), offer.bytes));
  pressure_ok &= pressure.Round();
  CHECK_CU(cuMemcpyDtoD(mapped, staging, offer.bytes));
  CHECK_CU(cuCtxSynchronize());
  const uint64_t written = Fnv(two.data(), offer.bytes);
  std::printf("importer_reads_back %s\n",
              DeviceChecksum(mapped, offer.bytes) == written ? "ok" : "MISMATCH");
  std::fflush(stdout);
  SendAll(kChannelFd, &written, sizeof(written));
  char verified = 0;
  ReceiveAll(kChannelFd, &verified, 1);
  pressure_ok &= pressure.Round();
  std::printf("importer_close %d %d\n", cuIpcCloseMemHandle(mapped),
              cuIpcCloseMemHandle(mapped_again));
  std::printf("importer_pressure %s\n", pressure_ok ? "ok" : "MISMATCH");
  std::fflush(stdout);
  const char closed = 'c';
  SendAll(kChannelFd, &closed, 1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "exporter") == 0) {
    return RunExporter(argv[0], std::stoull(argv[2]), std::stoull(argv[3]), std::stoull(argv[4]));
  }
  if (argc == 3 && std::strcmp(argv[1], "importer") == 0) {
    return RunImporter(std::stoull(argv[2]));
  }
  std::fprintf(stderr, "usage: %s exporter BLOCK PRESSURE IMPORTER_PRESSURE\n", argv[0]);
  return 2;
}

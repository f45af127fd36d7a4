// Legacy CUDA IPC between processes (Note [ipc backing] in sim/src/ipc.h): a helper process
// (memsim_probe ipc) opens a handle of this process's cuMemAlloc memory, checks its bytes and
// writes their complement back. Part of memsim_api_test.
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "sim_test_util.h"

namespace memsim_test {
namespace {

constexpr size_t kBytes = 1u << 20;

template <typename Handle>
std::string Hex(const Handle& h) {
  std::string s;
  char byte[3];
  for (char c : h.reserved) {
    std::snprintf(byte, sizeof(byte), "%02x", static_cast<unsigned char>(c));
    s += byte;
  }
  return s;
}

// Runs the probe on `handle` with extra environment `env`; returns its output line.
std::string RunIpcProbe(const CUipcMemHandle& handle, const std::string& env = "") {
  const std::string cmd =
      env + " " + MEMSIM_PROBE_PATH + " ipc " + Hex(handle) + " " + std::to_string(kBytes);
  FILE* out = popen(cmd.c_str(), "r");
  if (out == nullptr) return "popen failed";
  char line[128] = {};
  if (std::fgets(line, sizeof(line), out) == nullptr) line[0] = '\0';
  const int status = pclose(out);
  std::string s(line);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return status == 0 ? s : "probe failed: " + s;
}

using SimIpcTest = SimTest;

TEST_F(SimIpcTest, AnotherProcessReadsAndWritesExportedMemory) {
  auto data = Pattern(kBytes / 4, 31);
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kBytes));
  ASSERT_CU(cuMemcpyHtoD(d, data.data(), kBytes));
  int capable = 0;
  ASSERT_CU(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
  EXPECT_EQ(capable, 1);
  CUipcMemHandle handle;
  ASSERT_CU(cuIpcGetMemHandle(&handle, d));
  EXPECT_EQ(RunIpcProbe(handle), "checksum " + std::to_string(Checksum(data.data(), kBytes)));
  for (auto& w : data) w = ~w;  // what the probe wrote back
  std::vector<uint32_t> back(kBytes / 4);
  ASSERT_CU(cuMemcpyDtoH(back.data(), d, kBytes));
  EXPECT_EQ(Checksum(back.data(), kBytes), Checksum(data.data(), kBytes));
  EXPECT_CU(cuMemFree(d));
}

TEST_F(SimIpcTest, HandlesOpenOnlyInOtherProcessesOfTheSameNode) {
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kBytes));
  CUipcMemHandle handle;
  ASSERT_CU(cuIpcGetMemHandle(&handle, d));
  CUdeviceptr opened;
  EXPECT_EQ(cuIpcOpenMemHandle(&opened, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(RunIpcProbe(handle, "MEMSIM_NODE=ipc-test-other-node"),
            "error " + std::to_string(CUDA_ERROR_INVALID_VALUE));
  EXPECT_EQ(cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE);  // not opened by IPC
  EXPECT_CU(cuMemFree(d));
}

TEST_F(SimIpcTest, OnlyCuMemAllocMemoryCanBeExported) {
  CUipcMemHandle handle;
  CUdeviceptr pooled;
  ASSERT_CU(cuMemAllocAsync(&pooled, kBytes, nullptr));
  EXPECT_EQ(cuIpcGetMemHandle(&handle, pooled), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemFreeAsync(pooled, nullptr));
  CUdeviceptr va;
  const size_t chunk = 2u << 20;
  ASSERT_CU(cuMemAddressReserve(&va, chunk, 0, 0, 0));
  CUmemAllocationProp prop = PinnedProp();
  CUmemGenericAllocationHandle h;
  ASSERT_CU(cuMemCreate(&h, chunk, &prop, 0));
  ASSERT_CU(cuMemMap(va, chunk, 0, h, 0));
  EXPECT_EQ(cuIpcGetMemHandle(&handle, va), CUDA_ERROR_INVALID_VALUE);
  EXPECT_CU(cuMemUnmap(va, chunk));
  EXPECT_CU(cuMemRelease(h));
  EXPECT_CU(cuMemAddressFree(va, chunk));
  CUdeviceptr d;
  ASSERT_CU(cuMemAlloc(&d, kBytes));
  EXPECT_EQ(cuIpcGetMemHandle(&handle, d + 4096), CUDA_ERROR_INVALID_VALUE);  // not the base
  EXPECT_CU(cuMemFree(d));
  EXPECT_CU(cuCtxSynchronize());
}

std::string ReadLine(FILE* from) {
  char line[128] = {};
  if (std::fgets(line, sizeof(line), from) == nullptr) return "";
  std::string s(line);
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Note [ipc events] in sim/src/ipc_event.h.
TEST_F(SimIpcTest, InterprocessEventCompletesInAnotherProcessWhenItsStreamGetsThere) {
  CUevent ev, plain, opened;
  EXPECT_EQ(cuEventCreate(&ev, CU_EVENT_INTERPROCESS),
            CUDA_ERROR_INVALID_VALUE);  // needs timing off
  ASSERT_CU(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  ASSERT_CU(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
  CUipcEventHandle handle;
  EXPECT_EQ(cuIpcGetEventHandle(&handle, plain), CUDA_ERROR_INVALID_VALUE);
  CUstream s;
  ASSERT_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  std::atomic<bool> release{false};
  ASSERT_CU(cuLaunchHostFunc(
      s,
      [](void* flag) {
        while (!static_cast<std::atomic<bool>*>(flag)->load()) usleep(1000);
      },
      &release));
  ASSERT_CU(cuEventRecord(ev, s));  // reached only once `release` is set
  ASSERT_CU(cuIpcGetEventHandle(&handle, ev));
  EXPECT_EQ(cuIpcOpenEventHandle(&opened, handle), CUDA_ERROR_INVALID_CONTEXT);  // the exporter
  const std::string cmd = std::string(MEMSIM_PROBE_PATH) + " ipcevent " + Hex(handle);
  FILE* probe = popen(cmd.c_str(), "r");
  ASSERT_NE(probe, nullptr);
  EXPECT_EQ(ReadLine(probe), "query 600");  // CUDA_ERROR_NOT_READY: the stream is held
  release = true;
  EXPECT_EQ(ReadLine(probe), "synchronized 0");
  EXPECT_EQ(ReadLine(probe), "waited 0 0");
  EXPECT_EQ(ReadLine(probe), "record 801");  // CUDA_ERROR_NOT_SUPPORTED on an opened event
  EXPECT_EQ(pclose(probe), 0);
  ASSERT_CU(cuStreamSynchronize(s));
  EXPECT_CU(cuEventDestroy(ev));
  EXPECT_CU(cuEventDestroy(plain));
  EXPECT_CU(cuStreamDestroy(s));
}

}  // namespace
}  // namespace memsim_test

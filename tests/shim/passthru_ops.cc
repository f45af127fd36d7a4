// Operations that reach device memory without being kernels or plain copies
// (batched copies, 3D peer copies, stream memory operations), queued behind
// a gate while the host pages the rest of a footprint 3x the device: a chunk
// an untracked operation uses can be evicted (unmapped) before the operation
// runs, which then faults or loses bytes. Prints "result <CUresult>" of the
// stream and the checksums of the operation's buffers and of all buffers.
//
// Usage: passthru_ops <batch|peer3d|value|batchmemop> <footprint bytes>
// Exit: 0 (the harness compares the output with an unconstrained run).
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr size_t kBuffer = 2 << 20;

uint64_t Mix(uint64_t h, const std::vector<unsigned char>& bytes) {
  for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  return h;
}

uint64_t Read(CUdeviceptr p, uint64_t h) {
  std::vector<unsigned char> host(kBuffer);
  CHECK_CU(cuMemcpyDtoH(host.data(), p, kBuffer));
  return Mix(h, host);
}

// Enqueues the operation under test on `s`: it reads buffer `a` and writes `b`.
CUresult Enqueue(const std::string& mode, CUstream s, CUdeviceptr a, CUdeviceptr b, CUcontext ctx) {
  if (mode == "batch") {
    CUdeviceptr dsts[] = {b, b + kBuffer / 2};
    CUdeviceptr srcs[] = {a + kBuffer / 2, a};
    size_t sizes[] = {kBuffer / 2, kBuffer / 2};
    CUmemcpyAttributes attr = {};
    attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t idx0 = 0;
    return cuMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx0, 1, s);
  }
  if (mode == "peer3d") {
    CUDA_MEMCPY3D_PEER p = {};
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = a;
    p.dstDevice = b;
    p.srcContext = p.dstContext = ctx;
    p.srcPitch = p.dstPitch = 4096;
    p.srcHeight = p.dstHeight = 16;
    p.srcXInBytes = 64;
    p.WidthInBytes = 2048;
    p.Height = 16;
    p.Depth = 32;  // 32 slices of 16 rows of 4 KiB: the whole 2 MiB
    return cuMemcpy3DPeerAsync(&p, s);
  }
  if (mode == "value") {
    for (int i = 0; i < 8; ++i) {
      if (CUresult r = cuStreamWriteValue32(s, b + i * 4096, 0x51000000u + i, 0)) return r;
      if (CUresult r = cuStreamWriteValue64(s, a + i * 8192 + 8, 0x6200000000000000ull + i, 0)) {
        return r;
      }
    }
    // Holds until the value written just before is there (it is: in order).
    return cuStreamWaitValue32(s, b + 7 * 4096, 0x51000007u, CU_STREAM_WAIT_VALUE_EQ);
  }
  if (mode == "batchmemop") {
    CUstreamBatchMemOpParams ops[3] = {};
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = b + 12;
    ops[0].writeValue.value = 0x7300abcdu;
    ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[1].writeValue.address = a + kBuffer - 8;
    ops[1].writeValue.value64 = 0x8400000000001234ull;
    ops[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[2].waitValue.address = b + 12;
    ops[2].waitValue.value = 0x7300abcdu;
    ops[2].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    return cuStreamBatchMemOp(s, 3, ops, 0);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[1];
  const size_t count = std::strtoull(argv[2], nullptr, 10) / kBuffer;
  CUcontext ctx = SetUpPrimaryContext();
  std::vector<CUdeviceptr> buf(count);
  std::vector<unsigned char> host(kBuffer);
  for (size_t i = 0; i < count; ++i) {
    CHECK_CU(cuMemAlloc(&buf[i], kBuffer));
    for (size_t j = 0; j < kBuffer; ++j) host[j] = static_cast<unsigned char>(j * 13 + i * 7);
    CHECK_CU(cuMemcpyHtoD(buf[i], host.data(), kBuffer));
  }
  uint32_t* gate;
  CHECK_CU(cuMemAllocHost(reinterpret_cast<void**>(&gate), 4));
  *gate = 0;
  CUstream s;
  CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // The gate: page-locked host memory, not the shim's.
  CHECK_CU(cuStreamWaitValue32(s, reinterpret_cast<CUdeviceptr>(gate), 1, CU_STREAM_WAIT_VALUE_EQ));
  CHECK_CU(Enqueue(mode, s, buf[0], buf[1], ctx));
  // The host pages everything else in meanwhile (3x the device).
  uint64_t others = 1469598103934665603ull;
  for (size_t i = 2; i < count; ++i) others = Read(buf[i], others);
  __atomic_store_n(gate, 1u, __ATOMIC_RELEASE);
  std::printf("result %d\n", static_cast<int>(cuStreamSynchronize(s)));
  std::printf("a %016llx\n", static_cast<unsigned long long>(Read(buf[0], 1469598103934665603ull)));
  std::printf("b %016llx\n", static_cast<unsigned long long>(Read(buf[1], 1469598103934665603ull)));
  std::printf("others %016llx\n", static_cast<unsigned long long>(others));
  return 0;
}

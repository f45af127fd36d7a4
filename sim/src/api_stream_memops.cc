// Exported entry points: stream memory operations (cuStreamWriteValue32/64,
// cuStreamWaitValue32/64, cuStreamBatchMemOp) in every flavour cuda.h declares.
//
// Note [stream memory operations]: each operation addresses 4 or 8 naturally aligned bytes of
// device memory or of page-locked host memory the driver knows (cuMemHostAlloc,
// cuMemHostRegister), validated when the call is made like a copy's device side (Note [copy
// validation] in copy_ops.h); flags outside the documented ones are CUDA_ERROR_INVALID_VALUE.
// A write is stream work that stores the value (atomically, release). A wait is stream work
// that holds the stream until the condition on the word holds: GEQ ((int32_t)(*addr - value)
// >= 0, the documented wrap-around compare), EQ, AND ((*addr & value) != 0) or NOR
// (~(*addr | value) != 0). Writers (value writes, from any stream) wake waiting workers; a
// value the host or a copy stores is seen at the waiter's next look, at most kRecheck later.
// Either kind accessing memory unmapped when it runs faults: the context gets the sticky
// CUDA_ERROR_ILLEGAL_ADDRESS (a wait then gives up). As documented, a wait whose condition
// never holds blocks its stream for ever. Capturing stream memory operations (batch
// memory-operation graph nodes) is not simulated: under capture they fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "api_common.h"
#include "context.h"
#include "copy_ops.h"
#include "device_access.h"
#include "driver.h"
#include "fault_guard.h"
#include "graph.h"

using memsim::Context;
using memsim::Stream;
using namespace memsim::api;

namespace {

constexpr auto kRecheck = std::chrono::microseconds(200);

// Wakes waiting workers after a value write. Thread safety: thread-safe.
struct Signal {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t writes = 0;  // guarded by mu
};
Signal& TheSignal() {
  static Signal* s = new Signal;  // never destroyed: workers may run during exit
  return *s;
}

// One decoded operation.
struct MemOp {
  enum Kind { kWrite, kWait, kNone } kind = kNone;
  uint64_t addr = 0;
  uint64_t value = 0;
  bool wide = false;     // 64-bit
  unsigned compare = 0;  // CU_STREAM_WAIT_VALUE_{GEQ,EQ,AND,NOR}
};

bool Holds(const MemOp& op, uint64_t word) {
  switch (op.compare) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      return op.wide ? static_cast<int64_t>(word - op.value) >= 0
                     : static_cast<int32_t>(static_cast<uint32_t>(word) -
                                            static_cast<uint32_t>(op.value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return word == op.value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (word & op.value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return op.wide ? ~(word | op.value) != 0 : static_cast<uint32_t>(~(word | op.value)) != 0;
  }
  return false;
}

// Runs `op` on the stream worker; false once it faulted (the sticky error is then set).
bool Run(Context* raw, const MemOp& op) {
  const uint64_t size = op.wide ? 8 : 4;
  if (DeviceDenied(*raw->device(), op.addr, size, op.kind == MemOp::kWrite)) {
    raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);  // Note [per-device access]
    return false;
  }
  if (op.kind == MemOp::kWrite) {
    auto body = [&] {
      if (op.wide) {
        reinterpret_cast<std::atomic<uint64_t>*>(op.addr)->store(op.value,
                                                                 std::memory_order_release);
      } else {
        reinterpret_cast<std::atomic<uint32_t>*>(op.addr)->store(static_cast<uint32_t>(op.value),
                                                                 std::memory_order_release);
      }
    };
    if (!memsim::RunGuardedCall(body)) {
      raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
      return false;
    }
    Signal& s = TheSignal();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      ++s.writes;
    }
    s.cv.notify_all();
    return true;
  }
  if (op.kind != MemOp::kWait) return true;
  Signal& s = TheSignal();
  for (;;) {
    uint64_t seen = 0;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      seen = s.writes;
    }
    uint64_t word = 0;
    auto body = [&] {
      word =
          op.wide
              ? reinterpret_cast<std::atomic<uint64_t>*>(op.addr)->load(std::memory_order_acquire)
              : reinterpret_cast<std::atomic<uint32_t>*>(op.addr)->load(std::memory_order_acquire);
    };
    if (DeviceDenied(*raw->device(), op.addr, op.wide ? 8 : 4, false) ||
        !memsim::RunGuardedCall(body)) {
      raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
      return false;
    }
    if (Holds(op, word)) return true;
    if (raw->sticky_error() != CUDA_SUCCESS) return false;
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait_for(lock, kRecheck, [&] { return s.writes != seen; });
  }
}

// Validates the address of a 4- or 8-byte operation.
CUresult CheckAddress(uint64_t addr, bool wide, bool write) {
  if (addr % (wide ? 8 : 4) != 0) return CUDA_ERROR_INVALID_VALUE;
  memsim::CopyEnd end;
  return memsim::ResolveDeviceSide(addr, wide ? 8 : 4, write, &end);
}

CUresult DecodeWrite(uint64_t addr, uint64_t value, unsigned flags, bool wide, MemOp* out) {
  if ((flags & ~static_cast<unsigned>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckAddress(addr, wide, true)) return r;
  *out = MemOp{MemOp::kWrite, addr, value, wide, 0};
  return CUDA_SUCCESS;
}

CUresult DecodeWait(uint64_t addr, uint64_t value, unsigned flags, bool wide, MemOp* out) {
  const unsigned compare = flags & ~static_cast<unsigned>(CU_STREAM_WAIT_VALUE_FLUSH);
  if (compare > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckAddress(addr, wide, false)) return r;
  *out = MemOp{MemOp::kWait, addr, value, wide, compare};
  return CUDA_SUCCESS;
}

// Enqueues `ops` (decoded by `decode`, which may fail) as one stream operation.
template <typename Decode>
CUresult Submit(CUstream hStream, bool per_thread, Decode decode) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(hStream, per_thread, &ctx, &stream)) return r;
  std::vector<MemOp> ops;
  CUresult r = decode(&ops);
  if (auto capture = stream->capture()) {
    capture->Invalidate();
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (r != CUDA_SUCCESS) return r;
  Context* raw = ctx.get();
  memsim::StreamOp op;
  op.run = [raw, ops = std::move(ops)] {
    for (const MemOp& m : ops) {
      if (!Run(raw, m)) return;
    }
  };
  ctx->Enqueue(stream, std::move(op));
  return ctx->sticky_error();
}

CUresult Write(CUstream s, uint64_t addr, uint64_t value, unsigned flags, bool wide,
               bool per_thread) {
  return Submit(s, per_thread, [&](std::vector<MemOp>* ops) {
    MemOp op;
    CUresult r = DecodeWrite(addr, value, flags, wide, &op);
    ops->push_back(op);
    return r;
  });
}

CUresult Wait(CUstream s, uint64_t addr, uint64_t value, unsigned flags, bool wide,
              bool per_thread) {
  return Submit(s, per_thread, [&](std::vector<MemOp>* ops) {
    MemOp op;
    CUresult r = DecodeWait(addr, value, flags, wide, &op);
    ops->push_back(op);
    return r;
  });
}

// cuStreamBatchMemOp: `barrier_ok` for the _v2 ABI (CU_STREAM_MEM_OP_BARRIER).
CUresult Batch(CUstream s, unsigned count, CUstreamBatchMemOpParams* params, unsigned flags,
               bool barrier_ok, bool per_thread) {
  if (count == 0 || count >= 256 || params == nullptr || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Submit(s, per_thread, [&](std::vector<MemOp>* ops) {
    for (unsigned i = 0; i < count; ++i) {
      const CUstreamBatchMemOpParams& p = params[i];
      MemOp op;
      CUresult r = CUDA_SUCCESS;
      switch (p.operation) {
        case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
          const bool wide = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
          r = DecodeWrite(p.writeValue.address, wide ? p.writeValue.value64 : p.writeValue.value,
                          p.writeValue.flags, wide, &op);
          break;
        }
        case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
          const bool wide = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
          r = DecodeWait(p.waitValue.address, wide ? p.waitValue.value64 : p.waitValue.value,
                         p.waitValue.flags, wide, &op);
          break;
        }
        case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:  // nothing to flush in host memory
          if (p.flushRemoteWrites.flags != 0) r = CUDA_ERROR_INVALID_VALUE;
          break;
        case CU_STREAM_MEM_OP_BARRIER:  // stream work runs in order on one worker
          if (!barrier_ok) r = CUDA_ERROR_INVALID_VALUE;
          break;
        default:
          r = CUDA_ERROR_INVALID_VALUE;
      }
      if (r != CUDA_SUCCESS) return r;
      ops->push_back(op);
    }
    return CUDA_SUCCESS;
  });
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                      unsigned int flags) {
  return Write(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags) {
  return Write(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWriteValue32_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                           unsigned int flags) {
  return Write(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags) {
  return Write(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                      unsigned int flags) {
  return Write(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                         unsigned int flags) {
  return Write(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWriteValue64_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                           unsigned int flags) {
  return Write(s, addr, value, flags, true, true);
}
CUresult CUDAAPI cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                              unsigned int flags) {
  return Write(s, addr, value, flags, true, true);
}
CUresult CUDAAPI cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                     unsigned int flags) {
  return Wait(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                        unsigned int flags) {
  return Wait(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWaitValue32_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags) {
  return Wait(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                             unsigned int flags) {
  return Wait(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                     unsigned int flags) {
  return Wait(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                        unsigned int flags) {
  return Wait(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWaitValue64_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags) {
  return Wait(s, addr, value, flags, true, true);
}
CUresult CUDAAPI cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                             unsigned int flags) {
  return Wait(s, addr, value, flags, true, true);
}

CUresult CUDAAPI cuStreamBatchMemOp(CUstream s, unsigned int count,
                                    CUstreamBatchMemOpParams* params, unsigned int flags) {
  return Batch(s, count, params, flags, false, false);
}
CUresult CUDAAPI cuStreamBatchMemOp_ptsz(CUstream s, unsigned int count,
                                         CUstreamBatchMemOpParams* params, unsigned int flags) {
  return Batch(s, count, params, flags, false, true);
}
CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream s, unsigned int count,
                                       CUstreamBatchMemOpParams* params, unsigned int flags) {
  return Batch(s, count, params, flags, true, false);
}
CUresult CUDAAPI cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count,
                                            CUstreamBatchMemOpParams* params, unsigned int flags) {
  return Batch(s, count, params, flags, true, true);
}

}  // extern "C"

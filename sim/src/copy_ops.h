// Copy and memset operations as stream work (the "copy engines" of a simulated device).
//
// Note [copy validation]: device-side addresses are validated when the call is made: a range
// that is not entirely backed by accessible device memory (or by page-locked host memory the
// driver knows) fails with CUDA_ERROR_INVALID_VALUE for sync and async calls alike, as the
// driver does for pointers it cannot resolve. If the memory is unmapped between an async
// call and its execution, the engine's access faults and the context gets the sticky
// CUDA_ERROR_ILLEGAL_ADDRESS, as a kernel would.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_COPY_OPS_H_
#define MEMSIM_SRC_COPY_OPS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda_api.h"
#include "stream.h"

namespace memsim {

class Context;
class Device;

// One side of a copy. dev == nullptr for host memory.
struct CopyEnd {
  uint64_t addr = 0;
  Device* dev = nullptr;
};

// Resolves an address given as device memory (CUdeviceptr parameter): device memory must be
// accessible for [addr, addr + extent); page-locked host memory is accepted as host.
CUresult ResolveDeviceSide(uint64_t addr, size_t extent, bool write, CopyEnd* out);
// Resolves an address of unknown kind (cuMemcpy, CU_MEMORYTYPE_UNIFIED): device memory is
// validated as above, anything else is host memory.
CUresult ResolveUnified(uint64_t addr, size_t extent, bool write, CopyEnd* out);

// A 2D copy description; a 1D copy is rows = 1.
struct CopyShape {
  size_t width = 0;  // bytes per row
  size_t rows = 1;
  size_t src_pitch = 0;
  size_t dst_pitch = 0;
};

// The cuMemcpy3D description of one pitched copy between `dst` and `src` (what
// cuGraphMemcpyNodeGetParams reports for a captured copy).
CUDA_MEMCPY3D DescribePitchedCopy(CUmemorytype dst_type, uint64_t dst, CUmemorytype src_type,
                                  uint64_t src, const CopyShape& shape);

// The stream work of a copy / of a memset (see EnqueueCopy / EnqueueMemset).
StreamOp MakeCopyOp(Context* ctx, CopyEnd dst, CopyEnd src, CopyShape shape);
StreamOp MakeMemsetOp(Context* ctx, uint64_t dst, size_t pitch, uint32_t value, size_t element_size,
                      size_t width, size_t rows);

// Resolves one side of a copy described by a CUmemorytype (cuMemcpy2D/3D descriptors): HOST is
// any host address, DEVICE as ResolveDeviceSide, UNIFIED as ResolveUnified. Arrays are
// CUDA_ERROR_NOT_SUPPORTED.
CUresult ResolveByMemoryType(CUmemorytype type, uint64_t addr, size_t extent, bool write,
                             CopyEnd* out);

// Enqueues the copy on `stream`; returns the sequence number.
uint64_t EnqueueCopy(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                     CopyEnd dst, CopyEnd src, CopyShape shape);

// Enqueues a memset of `rows` rows of `width` elements of `element_size` bytes (1, 2 or 4).
uint64_t EnqueueMemset(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       uint64_t dst, size_t pitch, uint32_t value, size_t element_size,
                       size_t width, size_t rows);

}  // namespace memsim

#endif  // MEMSIM_SRC_COPY_OPS_H_

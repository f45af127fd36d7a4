// Batched copies, 3D peer copies, copies between device memory and CUDA
// arrays, and stream memory operations: the device bytes they touch are made
// resident and their use recorded on the stream before the driver gets them,
// as for every other copy (hooks_copy.cc).
//
// Note [batched device ranges]
//   cuMemcpyBatchAsync names its sides as plain pointers (any kind of
//   memory); cuMemcpy3DBatchAsync's pointer operands likewise (row length in
//   bytes and layer height in rows, 0 meaning packed), its array operands
//   are the driver's memory, never the shim's. A stream memory operation
//   addresses 4 or 8 bytes, which may be device memory, page-locked host
//   memory or the device memory of another allocator. Every such range is
//   handed to the core, which pages only what lies in its reservation and
//   passes the rest through untouched. The array side of cuMemcpyDtoA /
//   cuMemcpyAtoD is not the shim's; their device side is a range like any
//   copy's. Device-to-device pairs are noted for Note [hidden reach]; host
//   sources of a batch are not scanned (a batch names no memory types, and a
//   side the shim does not own may be device memory it cannot read).
#include <vector>

#include "shim/hooks/hook_util.h"

using memvirt::shim::MemRange;
using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Access;
using memvirt::shim::hooks::AccessRanges;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::kOverflowBytes;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;
using memvirt::shim::hooks::Side3D;

namespace {

void NoteDeviceCopy(CUdeviceptr dst, uint64_t dst_bytes, CUdeviceptr src, uint64_t src_bytes) {
  if (ShimCore* core = Runtime::Get().OwnerOf(src)) {
    core->OnDeviceCopy(dst, dst_bytes, src, src_bytes);
  }
}

// The sides of cuMemcpyBatchAsync's copies (none when an array is null: the
// driver refuses the call).
std::vector<MemRange> BatchRanges(const CUdeviceptr* dsts, const CUdeviceptr* srcs,
                                  const size_t* sizes, size_t count) {
  std::vector<MemRange> ranges;
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr) return ranges;
  ranges.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) continue;
    NoteDeviceCopy(dsts[i], sizes[i], srcs[i], sizes[i]);
    ranges.push_back({dsts[i], sizes[i]});
    ranges.push_back({srcs[i], sizes[i]});
  }
  return ranges;
}

// A pointer operand of a 3D batch copy (Note [batched device ranges]).
MemRange Operand(const CUmemcpy3DOperand& o, const CUextent3D& e) {
  if (o.type != CU_MEMCPY_OPERAND_TYPE_POINTER || e.width == 0 || e.height == 0 || e.depth == 0) {
    return {};
  }
  const size_t pitch = o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : e.width;
  const size_t rows = o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : e.height;
  return Side3D(CU_MEMORYTYPE_UNIFIED, o.op.ptr.ptr, 0, 0, 0, pitch, rows, e.width, e.height,
                e.depth);
}

std::vector<MemRange> Batch3DRanges(size_t count, const CUDA_MEMCPY3D_BATCH_OP* ops) {
  std::vector<MemRange> ranges;
  if (ops == nullptr) return ranges;
  ranges.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    const MemRange dst = Operand(ops[i].dst, ops[i].extent);
    const MemRange src = Operand(ops[i].src, ops[i].extent);
    if (dst.bytes != 0 && src.bytes != 0 && src.bytes != kOverflowBytes) {
      NoteDeviceCopy(dst.ptr, dst.bytes, src.ptr, src.bytes);
    }
    ranges.push_back(dst);
    ranges.push_back(src);
  }
  return ranges;
}

int Count(const std::vector<MemRange>& v) { return static_cast<int>(v.size()); }

// The bytes a stream memory operation of the batch addresses (none for
// flushes and barriers).
MemRange MemOpRange(const CUstreamBatchMemOpParams& p) {
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      return {p.writeValue.address, 4};
    case CU_STREAM_MEM_OP_WRITE_VALUE_64:
      return {p.writeValue.address, 8};
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      return {p.waitValue.address, 4};
    case CU_STREAM_MEM_OP_WAIT_VALUE_64:
      return {p.waitValue.address, 8};
    default:
      return {};
  }
}

std::vector<MemRange> MemOpRanges(unsigned count, const CUstreamBatchMemOpParams* ops) {
  std::vector<MemRange> ranges;
  if (ops == nullptr) return ranges;
  ranges.reserve(count);
  for (unsigned i = 0; i < count; ++i) ranges.push_back(MemOpRange(ops[i]));
  return ranges;
}

}  // namespace

#define MEMSHIM_3D_PEER_RANGES(c)                                                        \
  Side3D((c)->srcMemoryType, (c)->srcDevice, (c)->srcXInBytes, (c)->srcY, (c)->srcZ,     \
         (c)->srcPitch, (c)->srcHeight, (c)->WidthInBytes, (c)->Height, (c)->Depth),     \
      Side3D((c)->dstMemoryType, (c)->dstDevice, (c)->dstXInBytes, (c)->dstY, (c)->dstZ, \
             (c)->dstPitch, (c)->dstHeight, (c)->WidthInBytes, (c)->Height, (c)->Depth)

// ---- 3D peer copies (Note [cross-device copies] in cross_device.h) ----------
MEMSHIM_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* c) {
  if (c == nullptr) return Forward(Real().cuMemcpy3DPeer, c);
  return Access(Real().cuMemcpy3DPeer, {MEMSHIM_3D_PEER_RANGES(c)}, nullptr, false, true, c);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* c) {
  if (c == nullptr) return Forward(Real().cuMemcpy3DPeer_ptds, c);
  return Access(Real().cuMemcpy3DPeer_ptds, {MEMSHIM_3D_PEER_RANGES(c)}, nullptr, true, true, c);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* c, CUstream stream) {
  if (c == nullptr) return Forward(Real().cuMemcpy3DPeerAsync, c, stream);
  return Access(Real().cuMemcpy3DPeerAsync, {MEMSHIM_3D_PEER_RANGES(c)}, stream, false, false, c,
                stream);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* c, CUstream stream) {
  if (c == nullptr) return Forward(Real().cuMemcpy3DPeerAsync_ptsz, c, stream);
  return Access(Real().cuMemcpy3DPeerAsync_ptsz, {MEMSHIM_3D_PEER_RANGES(c)}, stream, true, false,
                c, stream);
}

// ---- Batched copies: the CUDA 12.8 ABI (failIdx) and CUDA 13's _v2 ----------
MEMSHIM_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                           size_t count, CUmemcpyAttributes* attrs,
                                           size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx,
                                           CUstream stream) {
  const auto r = BatchRanges(dsts, srcs, sizes, count);
  return AccessRanges(Real().cuMemcpyBatchAsync, r.data(), Count(r), stream, false, false, dsts,
                      srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                                size_t count, CUmemcpyAttributes* attrs,
                                                size_t* attrs_idxs, size_t num_attrs,
                                                size_t* fail_idx, CUstream stream) {
  const auto r = BatchRanges(dsts, srcs, sizes, count);
  return AccessRanges(Real().cuMemcpyBatchAsync_ptsz, r.data(), Count(r), stream, true, false, dsts,
                      srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                              size_t count, CUmemcpyAttributes* attrs,
                                              size_t* attrs_idxs, size_t num_attrs,
                                              CUstream stream) {
  const auto r = BatchRanges(dsts, srcs, sizes, count);
  return AccessRanges(Real().cuMemcpyBatchAsync_v2, r.data(), Count(r), stream, false, false, dsts,
                      srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs,
                                                   size_t* sizes, size_t count,
                                                   CUmemcpyAttributes* attrs, size_t* attrs_idxs,
                                                   size_t num_attrs, CUstream stream) {
  const auto r = BatchRanges(dsts, srcs, sizes, count);
  return AccessRanges(Real().cuMemcpyBatchAsync_v2_ptsz, r.data(), Count(r), stream, true, false,
                      dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                             size_t* fail_idx, unsigned long long flags,
                                             CUstream stream) {
  const auto r = Batch3DRanges(n, ops);
  return AccessRanges(Real().cuMemcpy3DBatchAsync, r.data(), Count(r), stream, false, false, n, ops,
                      fail_idx, flags, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                  size_t* fail_idx, unsigned long long flags,
                                                  CUstream stream) {
  const auto r = Batch3DRanges(n, ops);
  return AccessRanges(Real().cuMemcpy3DBatchAsync_ptsz, r.data(), Count(r), stream, true, false, n,
                      ops, fail_idx, flags, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                unsigned long long flags, CUstream stream) {
  const auto r = Batch3DRanges(n, ops);
  return AccessRanges(Real().cuMemcpy3DBatchAsync_v2, r.data(), Count(r), stream, false, false, n,
                      ops, flags, stream);
}
MEMSHIM_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                                     unsigned long long flags, CUstream stream) {
  const auto r = Batch3DRanges(n, ops);
  return AccessRanges(Real().cuMemcpy3DBatchAsync_v2_ptsz, r.data(), Count(r), stream, true, false,
                      n, ops, flags, stream);
}

// ---- Copies between device memory and CUDA arrays (synchronous) -------------
MEMSHIM_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr src, size_t n) {
  return Access(Real().cuMemcpyDtoA_v2, {MemRange{src, n}}, nullptr, false, true, dst, offset, src,
                n);
}
MEMSHIM_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t offset, CUdeviceptr src,
                                             size_t n) {
  return Access(Real().cuMemcpyDtoA_v2_ptds, {MemRange{src, n}}, nullptr, true, true, dst, offset,
                src, n);
}
MEMSHIM_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t offset, size_t n) {
  return Access(Real().cuMemcpyAtoD_v2, {MemRange{dst, n}}, nullptr, false, true, dst, src, offset,
                n);
}
MEMSHIM_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t offset,
                                             size_t n) {
  return Access(Real().cuMemcpyAtoD_v2_ptds, {MemRange{dst, n}}, nullptr, true, true, dst, src,
                offset, n);
}

// ---- Stream memory operations ------------------------------------------------
#define MEMSHIM_VALUE_OP(name, type, bytes, per_thread)                                          \
  MEMSHIM_EXPORT CUresult name(CUstream stream, CUdeviceptr addr, type value, unsigned flags) {  \
    return Access(Real().name, {MemRange{addr, bytes}}, stream, per_thread, false, stream, addr, \
                  value, flags);                                                                 \
  }
MEMSHIM_VALUE_OP(cuStreamWriteValue32, cuuint32_t, 4, false)
MEMSHIM_VALUE_OP(cuStreamWriteValue32_v2, cuuint32_t, 4, false)
MEMSHIM_VALUE_OP(cuStreamWriteValue32_ptsz, cuuint32_t, 4, true)
MEMSHIM_VALUE_OP(cuStreamWriteValue32_v2_ptsz, cuuint32_t, 4, true)
MEMSHIM_VALUE_OP(cuStreamWriteValue64, cuuint64_t, 8, false)
MEMSHIM_VALUE_OP(cuStreamWriteValue64_v2, cuuint64_t, 8, false)
MEMSHIM_VALUE_OP(cuStreamWriteValue64_ptsz, cuuint64_t, 8, true)
MEMSHIM_VALUE_OP(cuStreamWriteValue64_v2_ptsz, cuuint64_t, 8, true)
MEMSHIM_VALUE_OP(cuStreamWaitValue32, cuuint32_t, 4, false)
MEMSHIM_VALUE_OP(cuStreamWaitValue32_v2, cuuint32_t, 4, false)
MEMSHIM_VALUE_OP(cuStreamWaitValue32_ptsz, cuuint32_t, 4, true)
MEMSHIM_VALUE_OP(cuStreamWaitValue32_v2_ptsz, cuuint32_t, 4, true)
MEMSHIM_VALUE_OP(cuStreamWaitValue64, cuuint64_t, 8, false)
MEMSHIM_VALUE_OP(cuStreamWaitValue64_v2, cuuint64_t, 8, false)
MEMSHIM_VALUE_OP(cuStreamWaitValue64_ptsz, cuuint64_t, 8, true)
MEMSHIM_VALUE_OP(cuStreamWaitValue64_v2_ptsz, cuuint64_t, 8, true)
#undef MEMSHIM_VALUE_OP

#define MEMSHIM_BATCH_MEM_OP(name, per_thread)                                                     \
  MEMSHIM_EXPORT CUresult name(CUstream stream, unsigned count, CUstreamBatchMemOpParams* ops,     \
                               unsigned flags) {                                                   \
    const auto r = MemOpRanges(count, ops);                                                        \
    return AccessRanges(Real().name, r.data(), Count(r), stream, per_thread, false, stream, count, \
                        ops, flags);                                                               \
  }
MEMSHIM_BATCH_MEM_OP(cuStreamBatchMemOp, false)
MEMSHIM_BATCH_MEM_OP(cuStreamBatchMemOp_v2, false)
MEMSHIM_BATCH_MEM_OP(cuStreamBatchMemOp_ptsz, true)
MEMSHIM_BATCH_MEM_OP(cuStreamBatchMemOp_v2_ptsz, true)
#undef MEMSHIM_BATCH_MEM_OP

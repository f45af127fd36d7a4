// Exported entry points: batched and 3D peer copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync,
// cuMemcpy3DPeer, cuMemcpy3DPeerAsync) in every flavour cuda.h declares.
//
// Note [batched copies]: every copy of a call is validated before any is enqueued (an invalid
// one fails the call and, in the failIdx ABIs, reports its index); the copies then run as one
// stream operation, in array order (the driver guarantees no order within a batch, so any order
// is a valid one), each checked for access when it runs like any other copy (Note [copy
// validation] in copy_ops.h). A 3D copy is its depth slices, each a pitched 2D copy. Under
// capture, each copy (each slice) becomes a memcpy node, in order. CUDA arrays are not simulated:
// an array operand is CUDA_ERROR_NOT_SUPPORTED.
#include <limits>
#include <vector>

#include "api_common.h"
#include "context.h"
#include "copy_ops.h"
#include "graph.h"

using memsim::Context;
using memsim::CopyEnd;
using memsim::CopyShape;
using memsim::Stream;
using namespace memsim::api;

namespace {

constexpr size_t kNoIndex = std::numeric_limits<size_t>::max();

// One resolved pitched copy (a 1D copy is rows = 1).
struct Pending {
  CopyEnd dst, src;
  CopyShape shape;
  CUDA_MEMCPY3D desc{};  // what cuGraphMemcpyNodeGetParams reports for its captured node
};

// The bytes a pitched side spans, or false on overflow.
bool Extent(const CopyShape& shape, size_t pitch, size_t* out) {
  size_t span;
  if (__builtin_mul_overflow(shape.rows - 1, pitch, &span) ||
      __builtin_add_overflow(span, shape.width, out)) {
    return false;
  }
  return true;
}

// Resolves one pitched copy between `dst` and `src` of the given memory types.
CUresult Resolve(CUmemorytype dst_type, uint64_t dst, CUmemorytype src_type, uint64_t src,
                 const CopyShape& shape, Pending* out) {
  size_t dst_extent, src_extent;
  if (!Extent(shape, shape.dst_pitch, &dst_extent) ||
      !Extent(shape, shape.src_pitch, &src_extent)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = memsim::ResolveByMemoryType(dst_type, dst, dst_extent, true, &out->dst)) {
    return r;
  }
  if (CUresult r = memsim::ResolveByMemoryType(src_type, src, src_extent, false, &out->src)) {
    return r;
  }
  out->shape = shape;
  out->desc = memsim::DescribePitchedCopy(dst_type, dst, src_type, src, shape);
  return CUDA_SUCCESS;
}

// One side of a 3D copy: base address, position, pitch and rows per slice.
struct Side3D {
  CUmemorytype type;
  uint64_t base;
  size_t x, y, z, pitch, slice_rows;
};

// Appends the depth slices of a 3D copy of width x height x depth to `out`.
CUresult Resolve3D(const Side3D& dst, const Side3D& src, size_t width, size_t height, size_t depth,
                   std::vector<Pending>* out) {
  if (dst.type == CU_MEMORYTYPE_ARRAY || src.type == CU_MEMORYTYPE_ARRAY) {
    return CUDA_ERROR_NOT_SUPPORTED;  // CUDA arrays are not simulated
  }
  if (width == 0 || height == 0 || depth == 0) return CUDA_SUCCESS;
  const size_t dst_pitch = dst.pitch != 0 ? dst.pitch : width;
  const size_t src_pitch = src.pitch != 0 ? src.pitch : width;
  const size_t dst_rows = dst.slice_rows != 0 ? dst.slice_rows : height;
  const size_t src_rows = src.slice_rows != 0 ? src.slice_rows : height;
  if ((height > 1 || depth > 1) && (dst_pitch < width || src_pitch < width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (depth > 1 && (dst_rows < height || src_rows < height)) return CUDA_ERROR_INVALID_VALUE;
  CopyShape shape;
  shape.width = width;
  shape.rows = height;
  shape.dst_pitch = dst_pitch;
  shape.src_pitch = src_pitch;
  for (size_t z = 0; z < depth; ++z) {
    uint64_t d_off, s_off;
    if (__builtin_mul_overflow(static_cast<uint64_t>(dst.z + z) * dst_rows + dst.y, dst_pitch,
                               &d_off) ||
        __builtin_mul_overflow(static_cast<uint64_t>(src.z + z) * src_rows + src.y, src_pitch,
                               &s_off)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    Pending p;
    if (CUresult r = Resolve(dst.type, dst.base + d_off + dst.x, src.type, src.base + s_off + src.x,
                             shape, &p)) {
      return r;
    }
    out->push_back(p);
  }
  return CUDA_SUCCESS;
}

// Enqueues `copies` on the stream as one operation (Note [batched copies]); with `sync`, waits
// for it as a synchronous copy does (Note [sync copies] in api_copy.cc).
CUresult Submit(std::vector<Pending> copies, const std::shared_ptr<Context>& ctx,
                const std::shared_ptr<Stream>& stream, bool sync) {
  if (auto capture = stream->capture()) {
    for (const Pending& p : copies) {
      memsim::NodeOp op;
      op.type = CU_GRAPH_NODE_TYPE_MEMCPY;
      op.copy.dst = p.dst;
      op.copy.src = p.src;
      op.copy.shape = p.shape;
      op.copy.desc = p.desc;
      if (CUresult r = capture->Add(stream.get(), std::move(op))) return r;
    }
    return CUDA_SUCCESS;
  }
  if (copies.empty()) return ctx->sticky_error();
  std::vector<memsim::StreamOp> ops;
  ops.reserve(copies.size());
  for (const Pending& p : copies)
    ops.push_back(memsim::MakeCopyOp(ctx.get(), p.dst, p.src, p.shape));
  Context* raw = ctx.get();
  memsim::StreamOp batch;
  batch.run = [raw, ops = std::move(ops)] {
    for (const memsim::StreamOp& op : ops) {
      if (raw->sticky_error() != CUDA_SUCCESS) return;  // Note [sticky errors] in stream.h
      op.run();
    }
  };
  const uint64_t seq = ctx->Enqueue(stream, std::move(batch));
  if (sync) stream->WaitFor(seq);
  return ctx->sticky_error();
}

// Resolves the stream of an asynchronous or synchronous copy call; a synchronous one cannot be
// captured (api_copy.cc).
CUresult StreamFor(CUstream hStream, bool per_thread, bool sync, std::shared_ptr<Context>* ctx,
                   std::shared_ptr<Stream>* stream) {
  if (CUresult r = ResolveStreamForWork(hStream, per_thread, ctx, stream)) return r;
  if (sync) {
    if (auto capture = (*stream)->capture()) {
      capture->Invalidate();
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  }
  return CUDA_SUCCESS;
}

// Fails the call; a capturing stream's capture is invalidated, as for any other refused copy.
CUresult Refuse(const std::shared_ptr<Stream>& stream, CUresult r) {
  if (auto capture = stream->capture()) capture->Invalidate();
  return r;
}

CUresult Copy3DPeer(const CUDA_MEMCPY3D_PEER* p, CUstream hStream, bool per_thread, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = StreamFor(hStream, per_thread, sync, &ctx, &stream)) return r;
  const Side3D dst{p->dstMemoryType, CopyEndpoint(p->dstMemoryType, p->dstHost, p->dstDevice),
                   p->dstXInBytes,   p->dstY,
                   p->dstZ,          p->dstPitch,
                   p->dstHeight};
  const Side3D src{p->srcMemoryType, CopyEndpoint(p->srcMemoryType, p->srcHost, p->srcDevice),
                   p->srcXInBytes,   p->srcY,
                   p->srcZ,          p->srcPitch,
                   p->srcHeight};
  std::vector<Pending> copies;
  if (CUresult r = Resolve3D(dst, src, p->WidthInBytes, p->Height, p->Depth, &copies)) {
    return Refuse(stream, r);
  }
  return Submit(std::move(copies), ctx, stream, sync);
}

bool ValidOrder(CUmemcpySrcAccessOrder order) {
  return order == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

// cuMemcpyBatchAsync. `fail_idx` may be null (the CUDA 13 ABI has none). A source accessed
// "during the API call" is copied before the call returns (the batch is waited for).
CUresult CopyBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                   CUmemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs,
                   size_t* fail_idx, CUstream hStream, bool per_thread) {
  if (fail_idx != nullptr) *fail_idx = kNoIndex;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      attrs_idxs == nullptr || num_attrs == 0 || num_attrs > count || attrs_idxs[0] != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // "Must not be legacy NULL stream".
  if (hStream == CU_STREAM_LEGACY || (hStream == nullptr && !per_thread)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool during_call = false;
  for (size_t k = 0; k < num_attrs; ++k) {
    if ((k > 0 && attrs_idxs[k] <= attrs_idxs[k - 1]) || attrs_idxs[k] >= count ||
        !ValidOrder(attrs[k].srcAccessOrder)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    during_call |= attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  }
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = StreamFor(hStream, per_thread, /*sync=*/false, &ctx, &stream)) return r;
  std::vector<Pending> copies;
  copies.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) continue;
    CopyShape shape;
    shape.width = sizes[i];
    shape.dst_pitch = sizes[i];
    shape.src_pitch = sizes[i];
    Pending p;
    if (CUresult r =
            Resolve(CU_MEMORYTYPE_UNIFIED, dsts[i], CU_MEMORYTYPE_UNIFIED, srcs[i], shape, &p)) {
      if (fail_idx != nullptr) *fail_idx = i;
      return Refuse(stream, r);
    }
    copies.push_back(p);
  }
  const bool wait = during_call && stream->capture() == nullptr;
  return Submit(std::move(copies), ctx, stream, wait);
}

// A pointer operand: row length in bytes (elements of a byte), layer height in rows.
Side3D OperandSide(const CUmemcpy3DOperand& o) {
  return Side3D{CU_MEMORYTYPE_UNIFIED, o.op.ptr.ptr,        0, 0, 0,
                o.op.ptr.rowLength,    o.op.ptr.layerHeight};
}

// cuMemcpy3DBatchAsync with pointer operands (rowLength/layerHeight in bytes/rows; 0: packed).
CUresult Copy3DBatch(size_t num_ops, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx,
                     unsigned long long flags, CUstream hStream, bool per_thread) {
  if (fail_idx != nullptr) *fail_idx = kNoIndex;
  if (num_ops == 0 || ops == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (hStream == CU_STREAM_LEGACY || (hStream == nullptr && !per_thread)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = StreamFor(hStream, per_thread, /*sync=*/false, &ctx, &stream)) return r;
  std::vector<Pending> copies;
  bool during_call = false;
  for (size_t i = 0; i < num_ops; ++i) {
    const CUDA_MEMCPY3D_BATCH_OP& op = ops[i];
    CUresult r = CUDA_SUCCESS;
    if (op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0 ||
        !ValidOrder(op.srcAccessOrder)) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else if (op.src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY ||
               op.dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
      r = CUDA_ERROR_NOT_SUPPORTED;  // CUDA arrays are not simulated
    } else if (op.src.type != CU_MEMCPY_OPERAND_TYPE_POINTER ||
               op.dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER) {
      r = CUDA_ERROR_INVALID_VALUE;
    } else {
      r = Resolve3D(OperandSide(op.dst), OperandSide(op.src), op.extent.width, op.extent.height,
                    op.extent.depth, &copies);
    }
    if (r != CUDA_SUCCESS) {
      if (fail_idx != nullptr) *fail_idx = i;
      return Refuse(stream, r);
    }
    during_call |= op.srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL;
  }
  const bool wait = during_call && stream->capture() == nullptr;
  return Submit(std::move(copies), ctx, stream, wait);
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  return Copy3DPeer(p, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  return Copy3DPeer(p, nullptr, true, true);
}
CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  return Copy3DPeer(p, s, false, false);
}
CUresult CUDAAPI cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  return Copy3DPeer(p, s, true, false);
}

CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                    size_t count, CUmemcpyAttributes* attrs, size_t* attrs_idxs,
                                    size_t num_attrs, size_t* fail_idx, CUstream s) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, s, false);
}
CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                         size_t count, CUmemcpyAttributes* attrs,
                                         size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx,
                                         CUstream s) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, s, true);
}
CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                       size_t count, CUmemcpyAttributes* attrs, size_t* attrs_idxs,
                                       size_t num_attrs, CUstream s) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, nullptr, s, false);
}
CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                            size_t count, CUmemcpyAttributes* attrs,
                                            size_t* attrs_idxs, size_t num_attrs, CUstream s) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, nullptr, s, true);
}

CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx,
                                      unsigned long long flags, CUstream s) {
  return Copy3DBatch(n, ops, fail_idx, flags, s, false);
}
CUresult CUDAAPI cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_idx,
                                           unsigned long long flags, CUstream s) {
  return Copy3DBatch(n, ops, fail_idx, flags, s, true);
}
CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                         unsigned long long flags, CUstream s) {
  return Copy3DBatch(n, ops, nullptr, flags, s, false);
}
CUresult CUDAAPI cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP* ops,
                                              unsigned long long flags, CUstream s) {
  return Copy3DBatch(n, ops, nullptr, flags, s, true);
}

}  // extern "C"

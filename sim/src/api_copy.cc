// Exported entry points: cuMemcpy* and cuMemset* (sync and async, legacy and per-thread
// default-stream flavours).
//
// On a capturing stream, asynchronous copies and memsets become graph nodes and synchronous ones
// fail with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (Note [capture] in graph.h).
//
// Note [sync copies]: a synchronous copy or memset is enqueued on the default stream (legacy, or
// per-thread for the _ptds entry points) and waited for. That yields the documented behaviour:
// it is ordered after prior work of blocking streams and returns once the data has arrived.
#include "api_common.h"
#include "copy_ops.h"

using memsim::Context;
using memsim::CopyEnd;
using memsim::CopyShape;
using memsim::Stream;
using namespace memsim::api;

namespace {

enum class Side { kHost, kDevice, kUnified };

CUresult Resolve(Side side, uint64_t addr, size_t extent, bool write, CopyEnd* out) {
  switch (side) {
    case Side::kHost:
      if (addr == 0) return CUDA_ERROR_INVALID_VALUE;
      *out = CopyEnd{addr, nullptr};
      return CUDA_SUCCESS;
    case Side::kDevice:
      return memsim::ResolveDeviceSide(addr, extent, write, out);
    case Side::kUnified:
      return memsim::ResolveUnified(addr, extent, write, out);
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUmemorytype MemoryTypeOf(Side side) {
  switch (side) {
    case Side::kHost:
      return CU_MEMORYTYPE_HOST;
    case Side::kDevice:
      return CU_MEMORYTYPE_DEVICE;
    case Side::kUnified:
      return CU_MEMORYTYPE_UNIFIED;
  }
  return CU_MEMORYTYPE_UNIFIED;
}

// The cuMemcpy3D description of a captured copy (what cuGraphMemcpyNodeGetParams reports).
CUDA_MEMCPY3D Describe(Side dst_side, uint64_t dst, Side src_side, uint64_t src,
                       const CopyShape& shape) {
  return memsim::DescribePitchedCopy(MemoryTypeOf(dst_side), dst, MemoryTypeOf(src_side), src,
                                     shape);
}

CUresult Copy(Side dst_side, uint64_t dst, Side src_side, uint64_t src, CopyShape shape,
              CUstream hStream, bool per_thread, bool sync) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(hStream, per_thread, &ctx, &stream)) return r;
  auto capture = stream->capture();
  if (capture != nullptr && sync) {  // a synchronous call cannot be captured
    capture->Invalidate();
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (sync) {
    if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  }
  if (shape.width == 0 || shape.rows == 0) return CUDA_SUCCESS;
  const size_t dst_extent = (shape.rows - 1) * shape.dst_pitch + shape.width;
  const size_t src_extent = (shape.rows - 1) * shape.src_pitch + shape.width;
  CopyEnd d, s;
  CUresult r = Resolve(dst_side, dst, dst_extent, true, &d);
  if (r == CUDA_SUCCESS) r = Resolve(src_side, src, src_extent, false, &s);
  if (capture != nullptr) {
    if (r != CUDA_SUCCESS) {
      capture->Invalidate();
      return r;
    }
    memsim::NodeOp op;
    op.type = CU_GRAPH_NODE_TYPE_MEMCPY;
    op.copy.dst = d;
    op.copy.src = s;
    op.copy.shape = shape;
    op.copy.desc = Describe(dst_side, dst, src_side, src, shape);
    return capture->Add(stream.get(), std::move(op));
  }
  if (r != CUDA_SUCCESS) return r;
  const uint64_t seq = memsim::EnqueueCopy(ctx, stream, d, s, shape);
  if (sync) stream->WaitFor(seq);
  return ctx->sticky_error();
}

CUresult Copy1D(Side dst_side, uint64_t dst, Side src_side, uint64_t src, size_t bytes,
                CUstream hStream, bool per_thread, bool sync) {
  CopyShape shape;
  shape.width = bytes;
  shape.rows = 1;
  shape.src_pitch = bytes;
  shape.dst_pitch = bytes;
  return Copy(dst_side, dst, src_side, src, shape, hStream, per_thread, sync);
}

CUresult Memset(uint64_t dst, size_t pitch, uint32_t value, size_t element_size, size_t width,
                size_t rows, CUstream hStream, bool per_thread, bool sync) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStreamForWork(hStream, per_thread, &ctx, &stream)) return r;
  auto capture = stream->capture();
  if (capture != nullptr && sync) {  // a synchronous call cannot be captured
    capture->Invalidate();
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (sync) {
    if (CUresult r = memsim::CheckUnsafeCall()) return r;  // Note [capture modes]
  }
  CUresult r = CUDA_SUCCESS;
  if (dst % element_size != 0 || (rows > 1 && pitch % element_size != 0)) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (width == 0 || rows == 0) {
    return CUDA_SUCCESS;
  } else {
    CopyEnd d;
    r = memsim::ResolveDeviceSide(dst, (rows - 1) * pitch + width * element_size, true, &d);
  }
  if (capture != nullptr) {
    if (r != CUDA_SUCCESS) {
      capture->Invalidate();
      return r;
    }
    memsim::NodeOp op;
    op.type = CU_GRAPH_NODE_TYPE_MEMSET;
    op.memset.dst = dst;
    op.memset.pitch = pitch;
    op.memset.value = value;
    op.memset.elementSize = static_cast<unsigned>(element_size);
    op.memset.width = width;
    op.memset.height = rows;
    return capture->Add(stream.get(), std::move(op));
  }
  if (r != CUDA_SUCCESS) return r;
  const uint64_t seq =
      memsim::EnqueueMemset(ctx, stream, dst, pitch, value, element_size, width, rows);
  if (sync) stream->WaitFor(seq);
  return ctx->sticky_error();
}

Side SideOf(CUmemorytype type) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      return Side::kHost;
    case CU_MEMORYTYPE_DEVICE:
      return Side::kDevice;
    default:
      return Side::kUnified;
  }
}

CUresult Copy2D(const CUDA_MEMCPY2D* p, CUstream hStream, bool per_thread, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    return CUDA_ERROR_NOT_SUPPORTED;  // CUDA arrays are not simulated
  }
  if ((p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t src_base = CopyEndpoint(p->srcMemoryType, p->srcHost, p->srcDevice);
  const uint64_t dst_base = CopyEndpoint(p->dstMemoryType, p->dstHost, p->dstDevice);
  CopyShape shape;
  shape.width = p->WidthInBytes;
  shape.rows = p->Height;
  shape.src_pitch = p->srcPitch != 0 ? p->srcPitch : p->WidthInBytes;
  shape.dst_pitch = p->dstPitch != 0 ? p->dstPitch : p->WidthInBytes;
  const uint64_t src = src_base + p->srcY * shape.src_pitch + p->srcXInBytes;
  const uint64_t dst = dst_base + p->dstY * shape.dst_pitch + p->dstXInBytes;
  return Copy(SideOf(p->dstMemoryType), dst, SideOf(p->srcMemoryType), src, shape, hStream,
              per_thread, sync);
}

uint64_t H(const void* p) { return reinterpret_cast<uint64_t>(p); }

}  // namespace

// Each operation is exported in its legacy-default-stream and per-thread flavours.
#define MEMSIM_BOTH_FLAVOURS(legacy, per_thread_name, params, call_legacy, call_ptds) \
  CUresult CUDAAPI legacy params { return call_legacy; }                              \
  CUresult CUDAAPI per_thread_name params { return call_ptds; }

extern "C" {

MEMSIM_BOTH_FLAVOURS(cuMemcpy, cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n),
                     Copy1D(Side::kUnified, dst, Side::kUnified, src, n, nullptr, false, true),
                     Copy1D(Side::kUnified, dst, Side::kUnified, src, n, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpyAsync, cuMemcpyAsync_ptsz,
                     (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
                     Copy1D(Side::kUnified, dst, Side::kUnified, src, n, s, false, false),
                     Copy1D(Side::kUnified, dst, Side::kUnified, src, n, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds,
                     (CUdeviceptr dst, const void* src, size_t n),
                     Copy1D(Side::kDevice, dst, Side::kHost, H(src), n, nullptr, false, true),
                     Copy1D(Side::kDevice, dst, Side::kHost, H(src), n, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds, (void* dst, CUdeviceptr src, size_t n),
                     Copy1D(Side::kHost, H(dst), Side::kDevice, src, n, nullptr, false, true),
                     Copy1D(Side::kHost, H(dst), Side::kDevice, src, n, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds,
                     (CUdeviceptr dst, CUdeviceptr src, size_t n),
                     Copy1D(Side::kDevice, dst, Side::kDevice, src, n, nullptr, false, true),
                     Copy1D(Side::kDevice, dst, Side::kDevice, src, n, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz,
                     (CUdeviceptr dst, const void* src, size_t n, CUstream s),
                     Copy1D(Side::kDevice, dst, Side::kHost, H(src), n, s, false, false),
                     Copy1D(Side::kDevice, dst, Side::kHost, H(src), n, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz,
                     (void* dst, CUdeviceptr src, size_t n, CUstream s),
                     Copy1D(Side::kHost, H(dst), Side::kDevice, src, n, s, false, false),
                     Copy1D(Side::kHost, H(dst), Side::kDevice, src, n, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz,
                     (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s),
                     Copy1D(Side::kDevice, dst, Side::kDevice, src, n, s, false, false),
                     Copy1D(Side::kDevice, dst, Side::kDevice, src, n, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemcpyPeer, cuMemcpyPeer_ptds,
                     (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n),
                     ((void)dc, (void)sc,
                      Copy1D(Side::kDevice, dst, Side::kDevice, src, n, nullptr, false, true)),
                     ((void)dc, (void)sc,
                      Copy1D(Side::kDevice, dst, Side::kDevice, src, n, nullptr, true, true)))
MEMSIM_BOTH_FLAVOURS(
    cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz,
    (CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc, size_t n, CUstream s),
    ((void)dc, (void)sc, Copy1D(Side::kDevice, dst, Side::kDevice, src, n, s, false, false)),
    ((void)dc, (void)sc, Copy1D(Side::kDevice, dst, Side::kDevice, src, n, s, true, false)))
MEMSIM_BOTH_FLAVOURS(cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D* p),
                     Copy2D(p, nullptr, false, true), Copy2D(p, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D* p),
                     Copy2D(p, nullptr, false, true), Copy2D(p, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz,
                     (const CUDA_MEMCPY2D* p, CUstream s), Copy2D(p, s, false, false),
                     Copy2D(p, s, true, false))

MEMSIM_BOTH_FLAVOURS(cuMemsetD8_v2, cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, size_t n),
                     Memset(d, n, v, 1, n, 1, nullptr, false, true),
                     Memset(d, n, v, 1, n, 1, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD16_v2, cuMemsetD16_v2_ptds,
                     (CUdeviceptr d, unsigned short v, size_t n),
                     Memset(d, n * 2, v, 2, n, 1, nullptr, false, true),
                     Memset(d, n * 2, v, 2, n, 1, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD32_v2, cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned int v, size_t n),
                     Memset(d, n * 4, v, 4, n, 1, nullptr, false, true),
                     Memset(d, n * 4, v, 4, n, 1, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD8Async, cuMemsetD8Async_ptsz,
                     (CUdeviceptr d, unsigned char v, size_t n, CUstream s),
                     Memset(d, n, v, 1, n, 1, s, false, false),
                     Memset(d, n, v, 1, n, 1, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemsetD16Async, cuMemsetD16Async_ptsz,
                     (CUdeviceptr d, unsigned short v, size_t n, CUstream s),
                     Memset(d, n * 2, v, 2, n, 1, s, false, false),
                     Memset(d, n * 2, v, 2, n, 1, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemsetD32Async, cuMemsetD32Async_ptsz,
                     (CUdeviceptr d, unsigned int v, size_t n, CUstream s),
                     Memset(d, n * 4, v, 4, n, 1, s, false, false),
                     Memset(d, n * 4, v, 4, n, 1, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds,
                     (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h),
                     Memset(d, pitch, v, 1, w, h, nullptr, false, true),
                     Memset(d, pitch, v, 1, w, h, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds,
                     (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h),
                     Memset(d, pitch, v, 2, w, h, nullptr, false, true),
                     Memset(d, pitch, v, 2, w, h, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds,
                     (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h),
                     Memset(d, pitch, v, 4, w, h, nullptr, false, true),
                     Memset(d, pitch, v, 4, w, h, nullptr, true, true))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz,
                     (CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s),
                     Memset(d, pitch, v, 1, w, h, s, false, false),
                     Memset(d, pitch, v, 1, w, h, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz,
                     (CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h,
                      CUstream s),
                     Memset(d, pitch, v, 2, w, h, s, false, false),
                     Memset(d, pitch, v, 2, w, h, s, true, false))
MEMSIM_BOTH_FLAVOURS(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz,
                     (CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s),
                     Memset(d, pitch, v, 4, w, h, s, false, false),
                     Memset(d, pitch, v, 4, w, h, s, true, false))

}  // extern "C"

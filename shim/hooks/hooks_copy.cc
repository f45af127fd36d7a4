// Copies and memsets: the device bytes they touch are made resident first.
#include "shim/hooks/hook_util.h"

using memvirt::shim::MemRange;
using memvirt::shim::hooks::Access;
using memvirt::shim::hooks::AccessFromHost;
using memvirt::shim::hooks::Elements;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Side2D;
using memvirt::shim::hooks::Side3D;

namespace {

using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Runtime;

// Note [hidden reach] (shim/core/shim_core_hidden_reach.cc): what a copy
// tells the core about addresses stored in device memory. Each returns the
// destination range for the copy's range list (evaluated before the copy).
MemRange NoteDeviceCopy(const MemRange& dst, const MemRange& src) {
  if (ShimCore* core = Runtime::Get().OwnerOf(src.ptr)) {
    core->OnDeviceCopy(dst.ptr, dst.bytes, src.ptr, src.bytes);
  }
  return dst;
}

// The host rows of a 2D/3D copy to device memory: each slice scanned as the
// rows it copies (pitches narrower than the width are the driver's to refuse).
void NoteRows(const void* host, size_t x, size_t y, size_t pitch, CUdeviceptr dst, size_t dst_x,
              size_t dst_y, size_t dst_pitch, size_t width, size_t height) {
  ShimCore* core = Runtime::Get().core();
  if (core == nullptr || host == nullptr || pitch < width || dst_pitch < width) return;
  uint64_t src_off, dst_off;
  if (__builtin_mul_overflow(static_cast<uint64_t>(y), pitch, &src_off) ||
      __builtin_add_overflow(src_off, x, &src_off) ||
      __builtin_mul_overflow(static_cast<uint64_t>(dst_y), dst_pitch, &dst_off) ||
      __builtin_add_overflow(dst_off, dst_x, &dst_off)) {
    return;
  }
  core->OnHostWriteRows(dst + dst_off, dst_pitch, static_cast<const char*>(host) + src_off, pitch,
                        width, height);
}

bool DeviceSide(CUmemorytype type) {
  return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

void Note2D(const CUDA_MEMCPY2D* c) {
  if (c == nullptr || !DeviceSide(c->dstMemoryType)) return;
  if (c->srcMemoryType == CU_MEMORYTYPE_HOST) {
    NoteRows(c->srcHost, c->srcXInBytes, c->srcY, c->srcPitch, c->dstDevice, c->dstXInBytes,
             c->dstY, c->dstPitch, c->WidthInBytes, c->Height);
  } else if (DeviceSide(c->srcMemoryType)) {
    NoteDeviceCopy(Side2D(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch,
                          c->WidthInBytes, c->Height),
                   Side2D(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch,
                          c->WidthInBytes, c->Height));
  }
}

void Note3D(const CUDA_MEMCPY3D* c) {
  if (c == nullptr || !DeviceSide(c->dstMemoryType)) return;
  if (c->srcMemoryType == CU_MEMORYTYPE_HOST) {
    // Slice z of the source starts srcHeight rows after slice z - 1.
    for (size_t z = 0; z < c->Depth; ++z) {
      NoteRows(c->srcHost, c->srcXInBytes, (c->srcZ + z) * c->srcHeight + c->srcY, c->srcPitch,
               c->dstDevice, c->dstXInBytes, (c->dstZ + z) * c->dstHeight + c->dstY, c->dstPitch,
               c->WidthInBytes, c->Height);
    }
  } else if (DeviceSide(c->srcMemoryType)) {
    NoteDeviceCopy(Side3D(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ,
                          c->dstPitch, c->dstHeight, c->WidthInBytes, c->Height, c->Depth),
                   Side3D(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ,
                          c->srcPitch, c->srcHeight, c->WidthInBytes, c->Height, c->Depth));
  }
}

}  // namespace

// A synchronous entry point and its _ptds twin (legacy vs per-thread stream).
#define MEMSHIM_SYNC_PAIR(name, params, ranges, args)                                \
  MEMSHIM_EXPORT CUresult name params {                                              \
    return Access(Real().name, {MEMSHIM_UNPAREN ranges}, nullptr, false, true,       \
                  MEMSHIM_UNPAREN args);                                             \
  }                                                                                  \
  MEMSHIM_EXPORT CUresult name##_ptds params {                                       \
    return Access(Real().name##_ptds, {MEMSHIM_UNPAREN ranges}, nullptr, true, true, \
                  MEMSHIM_UNPAREN args);                                             \
  }

// An asynchronous entry point and its _ptsz twin.
#define MEMSHIM_ASYNC_PAIR(name, params, ranges, args)                               \
  MEMSHIM_EXPORT CUresult name params {                                              \
    return Access(Real().name, {MEMSHIM_UNPAREN ranges}, stream, false, false,       \
                  MEMSHIM_UNPAREN args);                                             \
  }                                                                                  \
  MEMSHIM_EXPORT CUresult name##_ptsz params {                                       \
    return Access(Real().name##_ptsz, {MEMSHIM_UNPAREN ranges}, stream, true, false, \
                  MEMSHIM_UNPAREN args);                                             \
  }

MEMSHIM_SYNC_PAIR(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n),
                  (NoteDeviceCopy(MemRange{dst, n}, MemRange{src, n}), MemRange{src, n}),
                  (dst, src, n))
MEMSHIM_ASYNC_PAIR(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream),
                   (NoteDeviceCopy(MemRange{dst, n}, MemRange{src, n}), MemRange{src, n}),
                   (dst, src, n, stream))
MEMSHIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return AccessFromHost(Real().cuMemcpyHtoD_v2, dst, src, n, nullptr, false, true, dst, src, n);
}
MEMSHIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return AccessFromHost(Real().cuMemcpyHtoD_v2_ptds, dst, src, n, nullptr, true, true, dst, src, n);
}
MEMSHIM_SYNC_PAIR(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (MemRange{src, n}),
                  (dst, src, n))
MEMSHIM_SYNC_PAIR(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n),
                  (NoteDeviceCopy(MemRange{dst, n}, MemRange{src, n}), MemRange{src, n}),
                  (dst, src, n))
MEMSHIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n,
                                             CUstream stream) {
  return AccessFromHost(Real().cuMemcpyHtoDAsync_v2, dst, src, n, stream, false, false, dst, src, n,
                        stream);
}
MEMSHIM_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n,
                                                  CUstream stream) {
  return AccessFromHost(Real().cuMemcpyHtoDAsync_v2_ptsz, dst, src, n, stream, true, false, dst,
                        src, n, stream);
}
MEMSHIM_ASYNC_PAIR(cuMemcpyDtoHAsync_v2, (void* dst, CUdeviceptr src, size_t n, CUstream stream),
                   (MemRange{src, n}), (dst, src, n, stream))
MEMSHIM_ASYNC_PAIR(cuMemcpyDtoDAsync_v2,
                   (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream),
                   (NoteDeviceCopy(MemRange{dst, n}, MemRange{src, n}), MemRange{src, n}),
                   (dst, src, n, stream))
// Peer copies name both contexts; the driver issues them in the current one
// (Note [cross-device copies] in cross_device.h).
MEMSHIM_SYNC_PAIR(cuMemcpyPeer,
                  (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                   size_t n),
                  (MemRange{dst, n}, MemRange{src, n}), (dst, dst_ctx, src, src_ctx, n))
MEMSHIM_ASYNC_PAIR(cuMemcpyPeerAsync,
                   (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                    size_t n, CUstream stream),
                   (MemRange{dst, n}, MemRange{src, n}), (dst, dst_ctx, src, src_ctx, n, stream))

#define MEMSHIM_2D_RANGES(c)                                                              \
  (Side2D((c)->srcMemoryType, (c)->srcDevice, (c)->srcXInBytes, (c)->srcY, (c)->srcPitch, \
          (c)->WidthInBytes, (c)->Height),                                                \
   Side2D((c)->dstMemoryType, (c)->dstDevice, (c)->dstXInBytes, (c)->dstY, (c)->dstPitch, \
          (c)->WidthInBytes, (c)->Height))
#define MEMSHIM_3D_RANGES(c)                                                          \
  (Side3D((c)->srcMemoryType, (c)->srcDevice, (c)->srcXInBytes, (c)->srcY, (c)->srcZ, \
          (c)->srcPitch, (c)->srcHeight, (c)->WidthInBytes, (c)->Height, (c)->Depth), \
   Side3D((c)->dstMemoryType, (c)->dstDevice, (c)->dstXInBytes, (c)->dstY, (c)->dstZ, \
          (c)->dstPitch, (c)->dstHeight, (c)->WidthInBytes, (c)->Height, (c)->Depth))

// 2D/3D copies: noted once the driver accepted them (it has then read the
// host rows the shim scans; an invalid copy is not read by the shim).
#define MEMSHIM_NOTED_SYNC_PAIR(name, params, ranges, args, note)                                  \
  MEMSHIM_EXPORT CUresult name params {                                                            \
    const CUresult r =                                                                             \
        Access(Real().name, {MEMSHIM_UNPAREN ranges}, nullptr, false, true, MEMSHIM_UNPAREN args); \
    if (r == CUDA_SUCCESS) note;                                                                   \
    return r;                                                                                      \
  }                                                                                                \
  MEMSHIM_EXPORT CUresult name##_ptds params {                                                     \
    const CUresult r = Access(Real().name##_ptds, {MEMSHIM_UNPAREN ranges}, nullptr, true, true,   \
                              MEMSHIM_UNPAREN args);                                               \
    if (r == CUDA_SUCCESS) note;                                                                   \
    return r;                                                                                      \
  }
#define MEMSHIM_NOTED_ASYNC_PAIR(name, params, ranges, args, note)                                 \
  MEMSHIM_EXPORT CUresult name params {                                                            \
    const CUresult r =                                                                             \
        Access(Real().name, {MEMSHIM_UNPAREN ranges}, stream, false, false, MEMSHIM_UNPAREN args); \
    if (r == CUDA_SUCCESS) note;                                                                   \
    return r;                                                                                      \
  }                                                                                                \
  MEMSHIM_EXPORT CUresult name##_ptsz params {                                                     \
    const CUresult r = Access(Real().name##_ptsz, {MEMSHIM_UNPAREN ranges}, stream, true, false,   \
                              MEMSHIM_UNPAREN args);                                               \
    if (r == CUDA_SUCCESS) note;                                                                   \
    return r;                                                                                      \
  }

MEMSHIM_NOTED_SYNC_PAIR(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* c), MEMSHIM_2D_RANGES(c), (c),
                        Note2D(c))
MEMSHIM_NOTED_SYNC_PAIR(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* c), MEMSHIM_2D_RANGES(c), (c),
                        Note2D(c))
MEMSHIM_NOTED_ASYNC_PAIR(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* c, CUstream stream),
                         MEMSHIM_2D_RANGES(c), (c, stream), Note2D(c))
MEMSHIM_NOTED_SYNC_PAIR(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* c), MEMSHIM_3D_RANGES(c), (c),
                        Note3D(c))
MEMSHIM_NOTED_ASYNC_PAIR(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* c, CUstream stream),
                         MEMSHIM_3D_RANGES(c), (c, stream), Note3D(c))

MEMSHIM_SYNC_PAIR(cuMemsetD8_v2, (CUdeviceptr dst, unsigned char v, size_t n), (MemRange{dst, n}),
                  (dst, v, n))
MEMSHIM_SYNC_PAIR(cuMemsetD16_v2, (CUdeviceptr dst, unsigned short v, size_t n),
                  (Elements(dst, n, 2)), (dst, v, n))
MEMSHIM_SYNC_PAIR(cuMemsetD32_v2, (CUdeviceptr dst, unsigned int v, size_t n),
                  (Elements(dst, n, 4)), (dst, v, n))
MEMSHIM_SYNC_PAIR(cuMemsetD2D8_v2,
                  (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),
                  (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, w, h)), (dst, pitch, v, w, h))
MEMSHIM_SYNC_PAIR(cuMemsetD2D16_v2,
                  (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),
                  (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, Elements(0, w, 2).bytes, h)),
                  (dst, pitch, v, w, h))
MEMSHIM_SYNC_PAIR(cuMemsetD2D32_v2,
                  (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h),
                  (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, Elements(0, w, 4).bytes, h)),
                  (dst, pitch, v, w, h))
MEMSHIM_ASYNC_PAIR(cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream stream),
                   (MemRange{dst, n}), (dst, v, n, stream))
MEMSHIM_ASYNC_PAIR(cuMemsetD16Async, (CUdeviceptr dst, unsigned short v, size_t n, CUstream stream),
                   (Elements(dst, n, 2)), (dst, v, n, stream))
MEMSHIM_ASYNC_PAIR(cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream stream),
                   (Elements(dst, n, 4)), (dst, v, n, stream))
MEMSHIM_ASYNC_PAIR(cuMemsetD2D8Async,
                   (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h,
                    CUstream stream),
                   (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, w, h)),
                   (dst, pitch, v, w, h, stream))
MEMSHIM_ASYNC_PAIR(cuMemsetD2D16Async,
                   (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h,
                    CUstream stream),
                   (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, Elements(0, w, 2).bytes, h)),
                   (dst, pitch, v, w, h, stream))
MEMSHIM_ASYNC_PAIR(cuMemsetD2D32Async,
                   (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h,
                    CUstream stream),
                   (Side2D(CU_MEMORYTYPE_DEVICE, dst, 0, 0, pitch, Elements(0, w, 4).bytes, h)),
                   (dst, pitch, v, w, h, stream))

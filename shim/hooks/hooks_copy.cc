// Copies and memsets: the device bytes they touch are made resident first.
#include "shim/hooks/hook_util.h"

using memvirt::shim::MemRange;
using memvirt::shim::hooks::Access;
using memvirt::shim::hooks::AccessFromHost;
using memvirt::shim::hooks::Elements;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Side2D;
using memvirt::shim::hooks::Side3D;

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
                  (MemRange{dst, n}, MemRange{src, n}), (dst, src, n))
MEMSHIM_ASYNC_PAIR(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream),
                   (MemRange{dst, n}, MemRange{src, n}), (dst, src, n, stream))
MEMSHIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return AccessFromHost(Real().cuMemcpyHtoD_v2, dst, src, n, nullptr, false, true, dst, src, n);
}
MEMSHIM_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return AccessFromHost(Real().cuMemcpyHtoD_v2_ptds, dst, src, n, nullptr, true, true, dst, src, n);
}
MEMSHIM_SYNC_PAIR(cuMemcpyDtoH_v2, (void* dst, CUdeviceptr src, size_t n), (MemRange{src, n}),
                  (dst, src, n))
MEMSHIM_SYNC_PAIR(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n),
                  (MemRange{dst, n}, MemRange{src, n}), (dst, src, n))
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
                   (MemRange{dst, n}, MemRange{src, n}), (dst, src, n, stream))
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

MEMSHIM_SYNC_PAIR(cuMemcpy2D_v2, (const CUDA_MEMCPY2D* c), MEMSHIM_2D_RANGES(c), (c))
MEMSHIM_SYNC_PAIR(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D* c), MEMSHIM_2D_RANGES(c), (c))
MEMSHIM_ASYNC_PAIR(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D* c, CUstream stream),
                   MEMSHIM_2D_RANGES(c), (c, stream))
MEMSHIM_SYNC_PAIR(cuMemcpy3D_v2, (const CUDA_MEMCPY3D* c), MEMSHIM_3D_RANGES(c), (c))
MEMSHIM_ASYNC_PAIR(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* c, CUstream stream),
                   MEMSHIM_3D_RANGES(c), (c, stream))

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

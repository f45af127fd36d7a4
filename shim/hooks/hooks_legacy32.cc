// The flavours before CUDA 3.2, with 32-bit device pointers and sizes.
//
// Note [32-bit entry points]
//   cuMemAlloc, cuMemcpyHtoD, cuMemsetD8, ... without _v2 take CUdeviceptr_v1
//   (32 bits). cuda.h has mapped every call to the _v2 flavours since CUDA
//   3.2, but cuGetProcAddress at a version below 3020 and dlsym by the old
//   name still reach them, so they are hooked too: no lookup of a hooked
//   name hands out a way around the shim (Note [entry-point substitution]).
//   The shim cannot give its memory a 32-bit address (the reservation is
//   anywhere in the 64-bit space), so:
//   * cuMemAlloc, cuMemAllocPitch: CUDA_ERROR_NOT_SUPPORTED while the shim
//     virtualizes memory (real memory handed out beside the budget would be
//     neither counted nor paged); forwarded when the shim is disabled.
//   * calls naming device memory (copies, memsets, cuMemFree,
//     cuMemGetAddressRange): a range that reaches the reservation is
//     CUDA_ERROR_NOT_SUPPORTED (the shim does not page through this ABI);
//     any other range is not shim memory and goes to the driver's flavour.
//   * cuMemGetInfo: the driver's answer decides success; the numbers are the
//     shim's virtual capacity, clamped to 32 bits.
//   The simulated driver answers CUDA_ERROR_NOT_SUPPORTED to all of them
//   (Note [32-bit legacy entry points] in sim/src/api_unsupported.cc).
#include <algorithm>
#include <climits>

#include "shim/core/log.h"
#include "shim/hooks/hook_util.h"

using memvirt::shim::MemRange;
using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;
using memvirt::shim::hooks::Side2D;
using memvirt::shim::hooks::Side3D;

namespace {

bool Reaches(const ShimCore& core, const MemRange& r) {
  if (r.bytes == 0) return false;
  const uint64_t end = r.ptr + r.bytes;  // 32-bit operands: cannot wrap unless bytes overflowed
  return end < r.ptr || (r.ptr < core.base() + core.va_bytes() && end > core.base());
}

// CUDA_SUCCESS if none of `ranges` reaches a reservation of the shim (any device's core).
CUresult OutsideShim(const char* name, std::initializer_list<MemRange> ranges) {
  bool reaches = false;
  Runtime::Get().ForEachCore([&](const ShimCore* core) {
    for (const MemRange& r : ranges) reaches = reaches || Reaches(*core, r);
  });
  if (!reaches) return CUDA_SUCCESS;
  MEMSHIM_LOG(kWarn, "%s (32-bit flavour) on shim memory: CUDA_ERROR_NOT_SUPPORTED", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

MemRange Bytes(CUdeviceptr_v1 ptr, uint64_t bytes) { return {ptr, bytes}; }

CUresult Refused32BitAllocation(const char* name) {
  MEMSHIM_LOG(kWarn, "%s (32-bit flavour): CUDA_ERROR_NOT_SUPPORTED under the shim", name);
  return CUDA_ERROR_NOT_SUPPORTED;
}

MemRange Side(const CUDA_MEMCPY2D_v1* c, bool src) {
  return src ? Side2D(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch,
                      c->WidthInBytes, c->Height)
             : Side2D(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch,
                      c->WidthInBytes, c->Height);
}

MemRange Side(const CUDA_MEMCPY3D_v1* c, bool src) {
  return src ? Side3D(c->srcMemoryType, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch,
                      c->srcHeight, c->WidthInBytes, c->Height, c->Depth)
             : Side3D(c->dstMemoryType, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, c->dstPitch,
                      c->dstHeight, c->WidthInBytes, c->Height, c->Depth);
}

template <typename Copy>
CUresult CheckCopy(const char* name, const Copy* c) {
  if (c == nullptr) return CUDA_SUCCESS;  // the driver refuses it
  return OutsideShim(name, {Side(c, true), Side(c, false)});
}

// 2D memsets: `height` rows of `pitch` bytes, `width` elements of `element` bytes in the last.
MemRange Rows32(CUdeviceptr_v1 ptr, unsigned pitch, unsigned width, unsigned height,
                unsigned element) {
  if (height == 0) return {};
  return Bytes(ptr, uint64_t{pitch} * (height - 1) + uint64_t{width} * element);
}

template <typename Fn, typename... Args>
CUresult ForwardOutsideShim(const char* name, std::initializer_list<MemRange> ranges, Fn fn,
                            Args... args) {
  if (CUresult r = OutsideShim(name, ranges); r != CUDA_SUCCESS) return r;
  return Forward(fn, args...);
}

}  // namespace

MEMSHIM_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  CUresult r = Forward(Real().cuMemGetInfo, free, total);
  if (r != CUDA_SUCCESS) return r;
  ShimCore* core = Runtime::Get().CoreForAlloc();
  size_t virtual_free = 0, virtual_total = 0;
  if (core == nullptr || core->GetInfo(&virtual_free, &virtual_total) != CUDA_SUCCESS) return r;
  *free = static_cast<unsigned>(std::min<size_t>(virtual_free, UINT_MAX));
  *total = static_cast<unsigned>(std::min<size_t>(virtual_total, UINT_MAX));
  return r;
}

MEMSHIM_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytes) {
  if (Runtime::Get().CoreForAlloc() != nullptr) return Refused32BitAllocation("cuMemAlloc");
  return Forward(Real().cuMemAlloc, dptr, bytes);
}

MEMSHIM_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pitch,
                                        unsigned int width, unsigned int height,
                                        unsigned int element_bytes) {
  if (Runtime::Get().CoreForAlloc() != nullptr) return Refused32BitAllocation("cuMemAllocPitch");
  return Forward(Real().cuMemAllocPitch, dptr, pitch, width, height, element_bytes);
}

MEMSHIM_EXPORT CUresult cuMemFree(CUdeviceptr_v1 ptr) {
  return ForwardOutsideShim("cuMemFree", {Bytes(ptr, 1)}, Real().cuMemFree, ptr);
}

MEMSHIM_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr_v1* base, unsigned int* size,
                                             CUdeviceptr_v1 ptr) {
  return ForwardOutsideShim("cuMemGetAddressRange", {Bytes(ptr, 1)}, Real().cuMemGetAddressRange,
                            base, size, ptr);
}

MEMSHIM_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int bytes) {
  return ForwardOutsideShim("cuMemcpyHtoD", {Bytes(dst, bytes)}, Real().cuMemcpyHtoD, dst, src,
                            bytes);
}

MEMSHIM_EXPORT CUresult cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int bytes) {
  return ForwardOutsideShim("cuMemcpyDtoH", {Bytes(src, bytes)}, Real().cuMemcpyDtoH, dst, src,
                            bytes);
}

MEMSHIM_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr_v1 dst, CUdeviceptr_v1 src, unsigned int bytes) {
  return ForwardOutsideShim("cuMemcpyDtoD", {Bytes(dst, bytes), Bytes(src, bytes)},
                            Real().cuMemcpyDtoD, dst, src, bytes);
}

MEMSHIM_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 dst, const void* src, unsigned int bytes,
                                          CUstream stream) {
  return ForwardOutsideShim("cuMemcpyHtoDAsync", {Bytes(dst, bytes)}, Real().cuMemcpyHtoDAsync, dst,
                            src, bytes, stream);
}

MEMSHIM_EXPORT CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr_v1 src, unsigned int bytes,
                                          CUstream stream) {
  return ForwardOutsideShim("cuMemcpyDtoHAsync", {Bytes(src, bytes)}, Real().cuMemcpyDtoHAsync, dst,
                            src, bytes, stream);
}

MEMSHIM_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 dst, CUdeviceptr_v1 src,
                                          unsigned int bytes, CUstream stream) {
  return ForwardOutsideShim("cuMemcpyDtoDAsync", {Bytes(dst, bytes), Bytes(src, bytes)},
                            Real().cuMemcpyDtoDAsync, dst, src, bytes, stream);
}

MEMSHIM_EXPORT CUresult cuMemcpy2D(const CUDA_MEMCPY2D_v1* copy) {
  if (CUresult r = CheckCopy("cuMemcpy2D", copy); r != CUDA_SUCCESS) return r;
  return Forward(Real().cuMemcpy2D, copy);
}

MEMSHIM_EXPORT CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D_v1* copy) {
  if (CUresult r = CheckCopy("cuMemcpy2DUnaligned", copy); r != CUDA_SUCCESS) return r;
  return Forward(Real().cuMemcpy2DUnaligned, copy);
}

MEMSHIM_EXPORT CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D_v1* copy, CUstream stream) {
  if (CUresult r = CheckCopy("cuMemcpy2DAsync", copy); r != CUDA_SUCCESS) return r;
  return Forward(Real().cuMemcpy2DAsync, copy, stream);
}

MEMSHIM_EXPORT CUresult cuMemcpy3D(const CUDA_MEMCPY3D_v1* copy) {
  if (CUresult r = CheckCopy("cuMemcpy3D", copy); r != CUDA_SUCCESS) return r;
  return Forward(Real().cuMemcpy3D, copy);
}

MEMSHIM_EXPORT CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D_v1* copy, CUstream stream) {
  if (CUresult r = CheckCopy("cuMemcpy3DAsync", copy); r != CUDA_SUCCESS) return r;
  return Forward(Real().cuMemcpy3DAsync, copy, stream);
}

MEMSHIM_EXPORT CUresult cuMemsetD8(CUdeviceptr_v1 dst, unsigned char value, unsigned int n) {
  return ForwardOutsideShim("cuMemsetD8", {Bytes(dst, n)}, Real().cuMemsetD8, dst, value, n);
}

MEMSHIM_EXPORT CUresult cuMemsetD16(CUdeviceptr_v1 dst, unsigned short value, unsigned int n) {
  return ForwardOutsideShim("cuMemsetD16", {Bytes(dst, 2ull * n)}, Real().cuMemsetD16, dst, value,
                            n);
}

MEMSHIM_EXPORT CUresult cuMemsetD32(CUdeviceptr_v1 dst, unsigned int value, unsigned int n) {
  return ForwardOutsideShim("cuMemsetD32", {Bytes(dst, 4ull * n)}, Real().cuMemsetD32, dst, value,
                            n);
}

MEMSHIM_EXPORT CUresult cuMemsetD2D8(CUdeviceptr_v1 dst, unsigned int pitch, unsigned char value,
                                     unsigned int width, unsigned int height) {
  return ForwardOutsideShim("cuMemsetD2D8", {Rows32(dst, pitch, width, height, 1)},
                            Real().cuMemsetD2D8, dst, pitch, value, width, height);
}

MEMSHIM_EXPORT CUresult cuMemsetD2D16(CUdeviceptr_v1 dst, unsigned int pitch, unsigned short value,
                                      unsigned int width, unsigned int height) {
  return ForwardOutsideShim("cuMemsetD2D16", {Rows32(dst, pitch, width, height, 2)},
                            Real().cuMemsetD2D16, dst, pitch, value, width, height);
}

MEMSHIM_EXPORT CUresult cuMemsetD2D32(CUdeviceptr_v1 dst, unsigned int pitch, unsigned int value,
                                      unsigned int width, unsigned int height) {
  return ForwardOutsideShim("cuMemsetD2D32", {Rows32(dst, pitch, width, height, 4)},
                            Real().cuMemsetD2D32, dst, pitch, value, width, height);
}

MEMSHIM_EXPORT CUresult cuMemcpyDtoA(CUarray dst, unsigned int offset, CUdeviceptr_v1 src,
                                     unsigned int bytes) {
  return ForwardOutsideShim("cuMemcpyDtoA", {Bytes(src, bytes)}, Real().cuMemcpyDtoA, dst, offset,
                            src, bytes);
}

MEMSHIM_EXPORT CUresult cuMemcpyAtoD(CUdeviceptr_v1 dst, CUarray src, unsigned int offset,
                                     unsigned int bytes) {
  return ForwardOutsideShim("cuMemcpyAtoD", {Bytes(dst, bytes)}, Real().cuMemcpyAtoD, dst, src,
                            offset, bytes);
}

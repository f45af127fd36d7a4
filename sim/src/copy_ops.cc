#include "copy_ops.h"

#include <cstring>
#include <thread>

#include "context.h"
#include "device.h"
#include "device_access.h"
#include "driver.h"
#include "fault_guard.h"
#include "link_charge.h"
#include "stream.h"

namespace memsim {

CUresult ResolveDeviceSide(uint64_t addr, size_t extent, bool write, CopyEnd* out) {
  if (addr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Device* dev = Driver::Get().DeviceForAddress(addr)) {
    if (!dev->va().IsAccessible(addr, extent, write)) return CUDA_ERROR_INVALID_VALUE;
    *out = CopyEnd{addr, dev};
    return CUDA_SUCCESS;
  }
  auto host = Driver::Get().host_memory.Lookup(addr);
  if (!host || addr + extent > host->base + host->size) return CUDA_ERROR_INVALID_VALUE;
  *out = CopyEnd{addr, nullptr};
  return CUDA_SUCCESS;
}

CUresult ResolveUnified(uint64_t addr, size_t extent, bool write, CopyEnd* out) {
  if (addr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Device* dev = Driver::Get().DeviceForAddress(addr)) {
    if (!dev->va().IsAccessible(addr, extent, write)) return CUDA_ERROR_INVALID_VALUE;
    *out = CopyEnd{addr, dev};
    return CUDA_SUCCESS;
  }
  *out = CopyEnd{addr, nullptr};
  return CUDA_SUCCESS;
}

namespace {

void CopyRows(const CopyEnd& dst, const CopyEnd& src, const CopyShape& shape) {
  auto* d = reinterpret_cast<unsigned char*>(dst.addr);
  const auto* s = reinterpret_cast<const unsigned char*>(src.addr);
  if (shape.rows == 1 || (shape.width == shape.src_pitch && shape.width == shape.dst_pitch)) {
    std::memmove(d, s, shape.width * shape.rows);
    return;
  }
  for (size_t r = 0; r < shape.rows; ++r) {
    std::memmove(d + r * shape.dst_pitch, s + r * shape.src_pitch, shape.width);
  }
}

}  // namespace

CUDA_MEMCPY3D DescribePitchedCopy(CUmemorytype dst_type, uint64_t dst, CUmemorytype src_type,
                                  uint64_t src, const CopyShape& shape) {
  CUDA_MEMCPY3D d{};
  d.srcMemoryType = src_type;
  if (src_type == CU_MEMORYTYPE_HOST) {
    d.srcHost = reinterpret_cast<const void*>(src);
  } else {
    d.srcDevice = src;
  }
  d.srcPitch = shape.src_pitch;
  d.srcHeight = shape.rows;
  d.dstMemoryType = dst_type;
  if (dst_type == CU_MEMORYTYPE_HOST) {
    d.dstHost = reinterpret_cast<void*>(dst);
  } else {
    d.dstDevice = dst;
  }
  d.dstPitch = shape.dst_pitch;
  d.dstHeight = shape.rows;
  d.WidthInBytes = shape.width;
  d.Height = shape.rows;
  d.Depth = 1;
  return d;
}

CUresult ResolveByMemoryType(CUmemorytype type, uint64_t addr, size_t extent, bool write,
                             CopyEnd* out) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      if (addr == 0) return CUDA_ERROR_INVALID_VALUE;
      *out = CopyEnd{addr, nullptr};
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
      return ResolveDeviceSide(addr, extent, write, out);
    case CU_MEMORYTYPE_UNIFIED:
      return ResolveUnified(addr, extent, write, out);
    case CU_MEMORYTYPE_ARRAY:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

StreamOp MakeCopyOp(Context* raw, CopyEnd dst, CopyEnd src, CopyShape shape) {
  StreamOp op;
  op.run = [raw, dst, src, shape] {
    const size_t rows = shape.rows == 0 ? 0 : shape.rows - 1;
    const size_t dst_extent = rows * shape.dst_pitch + shape.width;
    const size_t src_extent = rows * shape.src_pitch + shape.width;
    const Device& self = *raw->device();
    if (DeviceDenied(self, dst.addr, dst_extent, /*write=*/true) ||
        DeviceDenied(self, src.addr, src_extent, /*write=*/false)) {
      raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);  // Note [per-device access]
      return;
    }
    // Note [host-backed transfers]
    const LinkCharge link =
        ChargeOfCopy(dst, dst_extent, src, src_extent, shape.width * shape.rows);
    auto body = [&] {
      const auto done_at = link.Book();
      CopyRows(dst, src, shape);
      if (link.throttled()) std::this_thread::sleep_until(done_at);
    };
    if (!RunGuardedCall(body)) raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
  };
  return op;
}

uint64_t EnqueueCopy(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                     CopyEnd dst, CopyEnd src, CopyShape shape) {
  return ctx->Enqueue(stream, MakeCopyOp(ctx.get(), dst, src, shape));
}

StreamOp MakeMemsetOp(Context* raw, uint64_t dst, size_t pitch, uint32_t value, size_t element_size,
                      size_t width, size_t rows) {
  StreamOp op;
  op.run = [raw, dst, pitch, value, element_size, width, rows] {
    const size_t extent = rows == 0 ? 0 : (rows - 1) * pitch + width * element_size;
    if (DeviceDenied(*raw->device(), dst, extent, /*write=*/true)) {
      raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);  // Note [per-device access]
      return;
    }
    // Note [host-backed transfers]
    const LinkCharge link =
        ChargeOfMemset(*raw->device(), CopyEnd{dst, Driver::Get().DeviceForAddress(dst)}, extent,
                       width * element_size * rows);
    auto body = [&] {
      const auto done_at = link.Book();
      for (size_t r = 0; r < rows; ++r) {
        auto* row = reinterpret_cast<unsigned char*>(dst + r * pitch);
        if (element_size == 1) {
          std::memset(row, static_cast<int>(value & 0xff), width);
        } else if (element_size == 2) {
          auto* p = reinterpret_cast<uint16_t*>(row);
          for (size_t i = 0; i < width; ++i) p[i] = static_cast<uint16_t>(value);
        } else {
          auto* p = reinterpret_cast<uint32_t*>(row);
          for (size_t i = 0; i < width; ++i) p[i] = value;
        }
      }
      if (link.throttled()) std::this_thread::sleep_until(done_at);
    };
    if (!RunGuardedCall(body)) raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
  };
  return op;
}

uint64_t EnqueueMemset(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       uint64_t dst, size_t pitch, uint32_t value, size_t element_size,
                       size_t width, size_t rows) {
  return ctx->Enqueue(stream,
                      MakeMemsetOp(ctx.get(), dst, pitch, value, element_size, width, rows));
}

}  // namespace memsim

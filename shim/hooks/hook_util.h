// Helpers shared by the hook files: each exported function is one line that
// names its real counterpart, the memory it may touch and its stream.
//
// Thread safety: as the core (every helper may run on any thread).
#ifndef MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_
#define MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_

#include <cuda.h>

#include <initializer_list>

#include "shim/core/shim_core.h"
#include "shim/driver/scoped_context.h"
#include "shim/hooks/cross_device.h"
#include "shim/hooks/runtime.h"

#define MEMSHIM_EXPORT extern "C" __attribute__((visibility("default")))
#define MEMSHIM_UNPAREN(...) __VA_ARGS__

namespace memvirt::shim::hooks {

inline const RealFunctions& Real() { return Runtime::Get().real(); }

template <typename Fn, typename... Args>
inline CUresult Forward(Fn fn, Args... args) {
  return fn != nullptr ? fn(args...) : CUDA_ERROR_NOT_INITIALIZED;
}

// The context of `owner` while a call on its memory runs (Note [core routing]
// in runtime.h); with one device nothing is pushed and the driver is not
// asked.
inline ScopedContext OwnerContext(const ShimCore* owner) {
  const Runtime& runtime = Runtime::Get();
  return ScopedContext(runtime.driver(), runtime.single_core() ? nullptr : owner->context());
}

// Access() without an only core: no core yet, or several devices. The
// current device's core (if any) takes its own sides; every side in another
// device's reservation also goes to its own core (Note [cross-device copies]).
template <typename Fn, typename... Args>
CUresult AccessAnyDevice(const Runtime& runtime, Fn fn, const MemRange* ranges, int count,
                         CUstream stream, bool per_thread, bool synchronous, Args... args) {
  ShimCore* core = runtime.core();
  OtherDeviceSides others;
  CUresult r = others.Prepare(runtime, core, ranges, count);
  if (r != CUDA_SUCCESS) return r;
  ShimCore::Ticket ticket;
  if (core != nullptr) {
    r = core->BeforeAccess(ranges, count, stream, per_thread, synchronous, &ticket);
    if (r != CUDA_SUCCESS) return others.Finish(runtime, r, stream, per_thread);
  }
  r = Forward(fn, args...);
  ticket.Close();
  return others.Finish(runtime, r, stream, per_thread);
}

// Access() over `count` ranges at `ranges` (calls whose range list is an
// array: batched copies, batched stream memory operations).
template <typename Fn, typename... Args>
inline CUresult AccessRanges(Fn fn, const MemRange* ranges, int count, CUstream stream,
                             bool per_thread, bool synchronous, Args... args) {
  const Runtime& runtime = Runtime::Get();
  ShimCore* core = runtime.only_core();
  if (core == nullptr) {
    return AccessAnyDevice(runtime, fn, ranges, count, stream, per_thread, synchronous, args...);
  }
  ShimCore::Ticket ticket;
  CUresult r = core->BeforeAccess(ranges, count, stream, per_thread, synchronous, &ticket);
  if (r != CUDA_SUCCESS) return r;
  return Forward(fn, args...);  // `ticket` closes the enqueue window after the call
}

// Copies and memsets: make `ranges` resident on `stream`, then call `fn`.
template <typename Fn, typename... Args>
inline CUresult Access(Fn fn, std::initializer_list<MemRange> ranges, CUstream stream,
                       bool per_thread, bool synchronous, Args... args) {
  return AccessRanges(fn, ranges.begin(), static_cast<int>(ranges.size()), stream, per_thread,
                      synchronous, args...);
}

// Host-to-device copies: as Access; once the driver accepted the copy (and
// so could read the host bytes), the core looks at them for addresses of its
// blocks (Note [hidden reach] in shim/core/shim_core_hidden_reach.cc).
template <typename Fn, typename... Args>
inline CUresult AccessFromHost(Fn fn, CUdeviceptr dst, const void* src, size_t bytes,
                               CUstream stream, bool per_thread, bool synchronous, Args... args) {
  const CUresult r = Access(fn, {MemRange{dst, bytes}}, stream, per_thread, synchronous, args...);
  if (r != CUDA_SUCCESS) return r;
  if (ShimCore* core = Runtime::Get().core()) core->OnHostWrite(dst, src, bytes);
  return r;
}

// Kernel launches: decode the arguments, make what they reach resident.
template <typename Fn, typename... Args>
inline CUresult Launch(Fn fn, CUfunction f, void** params, void** extra, CUstream stream,
                       bool per_thread, Args... args) {
  ShimCore* core = Runtime::Get().core();
  if (core == nullptr) return Forward(fn, args...);
  ShimCore::Ticket ticket;
  CUresult r = core->BeforeLaunch(f, params, extra, stream, per_thread, &ticket);
  if (r != CUDA_SUCCESS) return r;
  return Forward(fn, args...);  // `ticket` closes the enqueue window after the call
}

// Ranges whose extent overflows 64 bits get bytes = kOverflowBytes, which
// the core refuses for its own memory (Note [copy ranges] in shim_core.h).
inline constexpr uint64_t kOverflowBytes = ~uint64_t{0};

// `count` elements of `element` bytes at `device`.
inline MemRange Elements(CUdeviceptr device, size_t count, size_t element) {
  uint64_t bytes;
  if (__builtin_mul_overflow(count, element, &bytes)) bytes = kOverflowBytes;
  return {device, bytes};
}

// The device bytes a 2D/3D copy side may touch: `rows` rows of `pitch` bytes
// from `first_row`, then `width` bytes from `x` in the last one.
inline MemRange Rows(CUdeviceptr device, size_t x, uint64_t first_row, uint64_t rows, size_t pitch,
                     size_t width) {
  uint64_t start, span, bytes, ptr;
  if (__builtin_mul_overflow(first_row, pitch, &start) ||
      __builtin_add_overflow(start, x, &start) || __builtin_mul_overflow(rows - 1, pitch, &span) ||
      __builtin_add_overflow(span, width, &bytes) || __builtin_add_overflow(device, start, &ptr)) {
    return {device, kOverflowBytes};
  }
  return {ptr, bytes};
}

inline MemRange Side2D(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                       size_t width, size_t height) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0) return {};
  return Rows(device, x, y, height, pitch, width);
}

inline MemRange Side3D(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t z,
                       size_t pitch, size_t plane_rows, size_t width, size_t height, size_t depth) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0 ||
      depth == 0) {
    return {};
  }
  uint64_t first_row, rows;
  if (__builtin_mul_overflow(static_cast<uint64_t>(z), plane_rows, &first_row) ||
      __builtin_add_overflow(first_row, y, &first_row) ||
      __builtin_mul_overflow(static_cast<uint64_t>(depth - 1), plane_rows, &rows) ||
      __builtin_add_overflow(rows, height, &rows)) {
    return {device, kOverflowBytes};
  }
  return Rows(device, x, first_row, rows, pitch, width);
}

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_

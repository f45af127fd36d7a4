// Helpers shared by the hook files: each exported function is one line that
// names its real counterpart, the memory it may touch and its stream.
//
// Thread safety: as the core (every helper may run on any thread).
#ifndef MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_
#define MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_

#include <cuda.h>

#include <initializer_list>

#include "shim/core/shim_core.h"
#include "shim/hooks/runtime.h"

#define MEMSHIM_EXPORT extern "C" __attribute__((visibility("default")))
#define MEMSHIM_UNPAREN(...) __VA_ARGS__

namespace memvirt::shim::hooks {

inline const RealFunctions& Real() { return Runtime::Get().real(); }

template <typename Fn, typename... Args>
inline CUresult Forward(Fn fn, Args... args) {
  return fn != nullptr ? fn(args...) : CUDA_ERROR_NOT_INITIALIZED;
}

// Copies and memsets: make `ranges` resident on `stream`, then call `fn`.
template <typename Fn, typename... Args>
inline CUresult Access(Fn fn, std::initializer_list<MemRange> ranges, CUstream stream,
                       bool per_thread, bool synchronous, Args... args) {
  ShimCore* core = Runtime::Get().core();
  if (core == nullptr) return Forward(fn, args...);
  ShimCore::Ticket ticket;
  CUresult r = core->BeforeAccess(ranges.begin(), static_cast<int>(ranges.size()), stream,
                                  per_thread, synchronous, &ticket);
  if (r != CUDA_SUCCESS) return r;
  r = Forward(fn, args...);
  ShimCore::AfterEnqueue(ticket);
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
  r = Forward(fn, args...);
  ShimCore::AfterEnqueue(ticket);
  return r;
}

// The device bytes a 2D/3D copy side may touch.
inline MemRange Side2D(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t pitch,
                       size_t width, size_t height) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0) return {};
  return {device + y * pitch + x, (height - 1) * pitch + width};
}

inline MemRange Side3D(CUmemorytype type, CUdeviceptr device, size_t x, size_t y, size_t z,
                       size_t pitch, size_t plane_rows, size_t width, size_t height, size_t depth) {
  if ((type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) || height == 0 ||
      depth == 0) {
    return {};
  }
  return {device + (z * plane_rows + y) * pitch + x,
          ((depth - 1) * plane_rows + (height - 1)) * pitch + width};
}

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_HOOK_UTIL_H_

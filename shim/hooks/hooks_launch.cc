// Kernel launches (graph launches: hooks_graph.cc).
#include "shim/hooks/hook_util.h"

using memvirt::shim::hooks::Launch;
using memvirt::shim::hooks::Real;

#define MEMSHIM_LAUNCH_KERNEL(name, per_thread)                                                 \
  MEMSHIM_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
                               unsigned int bx, unsigned int by, unsigned int bz,               \
                               unsigned int shared, CUstream stream, void** params,             \
                               void** extra) {                                                  \
    return Launch(Real().name, f, params, extra, stream, per_thread, f, gx, gy, gz, bx, by, bz, \
                  shared, stream, params, extra);                                               \
  }
MEMSHIM_LAUNCH_KERNEL(cuLaunchKernel, false)
MEMSHIM_LAUNCH_KERNEL(cuLaunchKernel_ptsz, true)

#define MEMSHIM_LAUNCH_KERNEL_EX(name, per_thread)                                              \
  MEMSHIM_EXPORT CUresult name(const CUlaunchConfig* config, CUfunction f, void** params,       \
                               void** extra) {                                                  \
    CUstream stream = config != nullptr ? config->hStream : nullptr;                            \
    return Launch(Real().name, f, params, extra, stream, per_thread, config, f, params, extra); \
  }
MEMSHIM_LAUNCH_KERNEL_EX(cuLaunchKernelEx, false)
MEMSHIM_LAUNCH_KERNEL_EX(cuLaunchKernelEx_ptsz, true)

#define MEMSHIM_LAUNCH_COOPERATIVE(name, per_thread)                                              \
  MEMSHIM_EXPORT CUresult name(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,   \
                               unsigned int bx, unsigned int by, unsigned int bz,                 \
                               unsigned int shared, CUstream stream, void** params) {             \
    return Launch(Real().name, f, params, nullptr, stream, per_thread, f, gx, gy, gz, bx, by, bz, \
                  shared, stream, params);                                                        \
  }
MEMSHIM_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel, false)
MEMSHIM_LAUNCH_COOPERATIVE(cuLaunchCooperativeKernel_ptsz, true)

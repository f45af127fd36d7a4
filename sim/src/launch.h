// Kernel launches: packs the arguments by the function's layout and enqueues the host-function
// kernel on a stream, run under the fault guard (see fault_guard.h).
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_LAUNCH_H_
#define MEMSIM_SRC_LAUNCH_H_

#include <memory>

#include "cuda_api.h"
#include "module.h"

namespace memsim {

class Context;
class Stream;

struct LaunchGeometry {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_mem_bytes;
};

// Validates geometry and arguments (kernelParams XOR the `extra` buffer protocol) and enqueues.
CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       const std::shared_ptr<Module>& module, Function* fn,
                       const LaunchGeometry& geometry, void** kernel_params, void** extra);

}  // namespace memsim

#endif  // MEMSIM_SRC_LAUNCH_H_

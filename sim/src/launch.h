// Kernel launches: packs the arguments by the function's layout and enqueues the host-function
// kernel on a stream, run under the fault guard (see fault_guard.h).
//
// Launches are split in two steps so that stream capture and graphs (graph.h) can reuse them:
// PackArgs() validates and copies the arguments (at launch, capture or node-creation time, as
// the driver does), MakeLaunchOp() builds the stream work of a kernel whose arguments are packed.
//
// Thread safety: thread-safe. A PackedArgs is immutable once built.
#ifndef MEMSIM_SRC_LAUNCH_H_
#define MEMSIM_SRC_LAUNCH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda_api.h"
#include "module.h"
#include "stream.h"

namespace memsim {

class Context;

struct LaunchGeometry {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_mem_bytes;
};

// Argument storage for one launch: a packed buffer laid out like the CUDA parameter buffer and
// the array of per-parameter pointers into it that the kernel receives.
struct PackedArgs {
  std::vector<uint64_t> buffer;  // 8-byte aligned storage
  std::vector<void*> pointers;
  size_t bytes = 0;  // layout total: the meaningful prefix of `buffer`
};

// CUDA_ERROR_INVALID_VALUE for zero or out-of-range grid and block dimensions.
CUresult ValidateGeometry(const LaunchGeometry& geometry);

// CUDA_ERROR_NOT_FOUND when `fn` has no host body (a kernel from an nvcc image without a host
// implementation, Note [host kernels] in host_kernels.h; reported once on stderr).
CUresult CheckHostEntry(const Function& fn);

// Copies the arguments (kernelParams XOR the `extra` buffer protocol) into *out.
CUresult PackArgs(const ParamLayout& layout, void** kernel_params, void** extra,
                  std::shared_ptr<PackedArgs>* out);

// A private copy of `args` (each launch of a graph gets its own argument copy, as on a GPU).
std::shared_ptr<PackedArgs> ClonePackedArgs(const PackedArgs& args, const ParamLayout& layout);

// The stream work that runs `fn` with packed arguments (on the worker of the stream it is
// enqueued on; a fault makes `ctx` sticky). REQUIRES: CheckHostEntry(*fn) succeeded.
StreamOp MakeLaunchOp(Context* ctx, const std::shared_ptr<Module>& module, const Function* fn,
                      const LaunchGeometry& geometry, std::shared_ptr<const PackedArgs> args);

// Validates geometry and arguments and enqueues (cuLaunchKernel and friends).
CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       const std::shared_ptr<Module>& module, Function* fn,
                       const LaunchGeometry& geometry, void** kernel_params, void** extra);

}  // namespace memsim

#endif  // MEMSIM_SRC_LAUNCH_H_

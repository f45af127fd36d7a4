#include "launch.h"

#include <cstring>
#include <vector>

#include "context.h"
#include "cuda_api.h"
#include "fault_guard.h"
#include "memsim/kernel.h"
#include "stream.h"

namespace memsim {

namespace {

thread_local const memsim_launch* t_current_launch = nullptr;

// Argument storage for one launch: a packed buffer laid out like the CUDA parameter buffer and
// the array of per-parameter pointers into it that the kernel receives.
struct PackedArgs {
  std::vector<uint64_t> buffer;  // 8-byte aligned storage
  std::vector<void*> pointers;
};

CUresult PackArgs(const ParamLayout& layout, void** kernel_params, void** extra, PackedArgs* out) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  out->buffer.assign(layout.total / 8 + 1, 0);
  auto* base = reinterpret_cast<unsigned char*>(out->buffer.data());
  const size_t n = layout.sizes.size();
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      if (kernel_params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
      std::memcpy(base + layout.offsets[i], kernel_params[i], layout.sizes[i]);
    }
  } else if (extra != nullptr) {
    const void* buf = nullptr;
    size_t buf_size = 0;
    bool have_size = false;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buf = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        if (extra[i + 1] == nullptr) return CUDA_ERROR_INVALID_VALUE;
        buf_size = *static_cast<const size_t*>(extra[i + 1]);
        have_size = true;
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (n > 0 && (buf == nullptr || !have_size || buf_size < layout.total)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (buf != nullptr && layout.total > 0) std::memcpy(base, buf, layout.total);
  } else if (n > 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  out->pointers.resize(n);
  for (size_t i = 0; i < n; ++i) out->pointers[i] = base + layout.offsets[i];
  return CUDA_SUCCESS;
}

}  // namespace

CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       const std::shared_ptr<Module>& module, Function* fn, const LaunchGeometry& g,
                       void** kernel_params, void** extra) {
  for (int i = 0; i < 3; ++i) {
    if (g.grid[i] == 0 || g.block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  if (static_cast<uint64_t>(g.block[0]) * g.block[1] * g.block[2] > 1024 || g.block[2] > 64 ||
      g.grid[1] > 65535 || g.grid[2] > 65535) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto args = std::make_shared<PackedArgs>();
  if (CUresult r = PackArgs(fn->layout(), kernel_params, extra, args.get())) return r;
  Context* raw = ctx.get();
  const KernelEntry entry = fn->entry();
  StreamOp op;
  op.run = [raw, module, entry, args, g] {
    memsim_launch info;
    info.grid = memsim_dim3{g.grid[0], g.grid[1], g.grid[2]};
    info.block = memsim_dim3{g.block[0], g.block[1], g.block[2]};
    info.shared_mem_bytes = g.shared_mem_bytes;
    std::vector<unsigned char> shared(g.shared_mem_bytes);
    info.shared_mem = shared.empty() ? nullptr : shared.data();
    void** params = args->pointers.empty() ? nullptr : args->pointers.data();
    t_current_launch = &info;
    auto body = [&] { entry(params); };
    const bool ok = RunGuardedCall(body);
    t_current_launch = nullptr;
    if (!ok) raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
  };
  ctx->Enqueue(stream, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace memsim

extern "C" const memsim_launch* memsim_current_launch(void) { return memsim::t_current_launch; }

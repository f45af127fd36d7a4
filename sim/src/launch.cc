#include "launch.h"

#include <cstring>
#include <vector>

#include "context.h"
#include "cuda_api.h"
#include "device.h"
#include "device_access.h"
#include "fault_guard.h"
#include "memsim/kernel.h"
#include "stream.h"

namespace memsim {

namespace {

thread_local const memsim_launch* t_current_launch = nullptr;

void PointInto(PackedArgs* args, const ParamLayout& layout) {
  auto* base = reinterpret_cast<unsigned char*>(args->buffer.data());
  args->pointers.resize(layout.sizes.size());
  for (size_t i = 0; i < layout.sizes.size(); ++i) args->pointers[i] = base + layout.offsets[i];
}

}  // namespace

CUresult ValidateGeometry(const LaunchGeometry& g) {
  for (int i = 0; i < 3; ++i) {
    if (g.grid[i] == 0 || g.block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  if (static_cast<uint64_t>(g.block[0]) * g.block[1] * g.block[2] > 1024 || g.block[2] > 64 ||
      g.grid[1] > 65535 || g.grid[2] > 65535) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CheckHostEntry(const Function& fn) {
  return fn.entry() != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult PackArgs(const ParamLayout& layout, void** kernel_params, void** extra,
                  std::shared_ptr<PackedArgs>* out) {
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto args = std::make_shared<PackedArgs>();
  args->buffer.assign(layout.total / 8 + 1, 0);
  args->bytes = layout.total;
  auto* base = reinterpret_cast<unsigned char*>(args->buffer.data());
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
  PointInto(args.get(), layout);
  *out = std::move(args);
  return CUDA_SUCCESS;
}

std::shared_ptr<PackedArgs> ClonePackedArgs(const PackedArgs& args, const ParamLayout& layout) {
  auto copy = std::make_shared<PackedArgs>();
  copy->buffer = args.buffer;
  copy->bytes = args.bytes;
  PointInto(copy.get(), layout);
  return copy;
}

StreamOp MakeLaunchOp(Context* raw, const std::shared_ptr<Module>& module, const Function* fn,
                      const LaunchGeometry& g, std::shared_ptr<const PackedArgs> args) {
  const KernelEntry entry = fn->entry();
  StreamOp op;
  op.run = [raw, module, entry, args = std::move(args), g] {
    if (ArgsReachDeniedMemory(*raw->device(), args->buffer.data(), args->bytes)) {
      raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);  // Note [per-device access]
      return;
    }
    memsim_launch info;
    info.grid = memsim_dim3{g.grid[0], g.grid[1], g.grid[2]};
    info.block = memsim_dim3{g.block[0], g.block[1], g.block[2]};
    info.shared_mem_bytes = g.shared_mem_bytes;
    std::vector<unsigned char> shared(g.shared_mem_bytes);
    info.shared_mem = shared.empty() ? nullptr : shared.data();
    void** params = args->pointers.empty() ? nullptr : const_cast<void**>(args->pointers.data());
    if (entry == nullptr) return;
    t_current_launch = &info;
    auto body = [&] { entry(params); };
    const bool ok = RunGuardedCall(body);
    t_current_launch = nullptr;
    if (!ok) raw->SetStickyError(CUDA_ERROR_ILLEGAL_ADDRESS);
  };
  return op;
}

CUresult EnqueueLaunch(const std::shared_ptr<Context>& ctx, const std::shared_ptr<Stream>& stream,
                       const std::shared_ptr<Module>& module, Function* fn, const LaunchGeometry& g,
                       void** kernel_params, void** extra) {
  if (CUresult r = ValidateGeometry(g)) return r;
  if (CUresult r = CheckHostEntry(*fn)) return r;
  std::shared_ptr<PackedArgs> args;
  if (CUresult r = PackArgs(fn->layout(), kernel_params, extra, &args)) return r;
  ctx->Enqueue(stream, MakeLaunchOp(ctx.get(), module, fn, g, std::move(args)));
  return CUDA_SUCCESS;
}

}  // namespace memsim

extern "C" const memsim_launch* memsim_current_launch(void) { return memsim::t_current_launch; }

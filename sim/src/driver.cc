#include "driver.h"

#include <algorithm>
#include <iterator>

#include "fault_guard.h"
#include "link_report.h"

namespace memsim {

Driver& Driver::Get() {
  static Driver* driver = new Driver();
  return *driver;
}

CUresult Driver::Init(unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(init_mu_);
  if (initialized()) return CUDA_SUCCESS;
  config_ = LoadConfigFromEnv();
  std::vector<std::unique_ptr<Device>> devices;
  for (int i = 0; i < config_.device_count; ++i) {
    auto dev = Device::Create(i, config_);
    if (!dev) {
      init_result_ = CUDA_ERROR_OUT_OF_MEMORY;
      return init_result_;
    }
    devices.push_back(std::move(dev));
  }
  devices_ = std::move(devices);
  for (const auto& dev : devices_) pools.Add(dev->default_pool());
  InstallFaultHandler();
  ReportLinkAtExitIfAsked();
  init_result_ = CUDA_SUCCESS;
  initialized_.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

Device* Driver::device(CUdevice ordinal) const {
  if (ordinal < 0 || ordinal >= device_count()) return nullptr;
  return devices_[ordinal].get();
}

Device* Driver::DeviceForAddress(uint64_t addr) const {
  if (!initialized()) return nullptr;
  for (const auto& d : devices_) {
    if (d->va().Contains(addr)) return d.get();
  }
  return nullptr;
}

std::shared_ptr<Module> Driver::LookupFunction(const void* handle, Function** fn,
                                               FunctionHandleKind* kind) {
  if (handle == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(fn_mu_);
  auto it = functions_.find(handle);
  if (it == functions_.end()) return nullptr;
  std::shared_ptr<Module> module = it->second.module.lock();
  if (module == nullptr) return nullptr;
  *fn = it->second.fn;
  *kind = it->second.kind;
  return module;
}

void Driver::RegisterFunction(Function* fn, const std::shared_ptr<Module>& module) {
  std::lock_guard<std::mutex> lock(fn_mu_);
  functions_[fn->handle()] = FunctionRecord{module, fn, FunctionHandleKind::kFunction};
  functions_[fn->kernel_handle()] = FunctionRecord{module, fn, FunctionHandleKind::kKernel};
}

void Driver::UnregisterModuleFunctions(const Module* module) {
  std::lock_guard<std::mutex> lock(fn_mu_);
  for (auto it = functions_.begin(); it != functions_.end();) {
    auto m = it->second.module.lock();
    it = (m == nullptr || m.get() == module) ? functions_.erase(it) : std::next(it);
  }
}

namespace {
thread_local std::vector<Context*> t_ctx_stack;
}  // namespace

Context* CurrentContextRaw() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

void SetCurrentContext(Context* ctx) {
  if (t_ctx_stack.empty()) {
    if (ctx != nullptr) t_ctx_stack.push_back(ctx);
  } else if (ctx == nullptr) {
    t_ctx_stack.pop_back();
  } else {
    t_ctx_stack.back() = ctx;
  }
}

void PushCurrentContext(Context* ctx) { t_ctx_stack.push_back(ctx); }

Context* PopCurrentContext() {
  if (t_ctx_stack.empty()) return nullptr;
  Context* top = t_ctx_stack.back();
  t_ctx_stack.pop_back();
  return top;
}

void RemoveFromCurrentStack(Context* ctx) {
  t_ctx_stack.erase(std::remove(t_ctx_stack.begin(), t_ctx_stack.end(), ctx), t_ctx_stack.end());
}

}  // namespace memsim

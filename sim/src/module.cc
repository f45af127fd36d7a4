#include "module.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>

namespace memsim {

ParamLayout MakeParamLayout(const unsigned* sizes) {
  ParamLayout layout;
  if (sizes == nullptr) return layout;
  size_t offset = 0;
  for (const unsigned* s = sizes; *s != 0; ++s) {
    const size_t size = *s;
    // Natural alignment min(size, 8), rounded down to a power of two for odd sizes.
    const size_t limit = std::min<size_t>(size, 8);
    size_t a = 1;
    while (a * 2 <= limit) a *= 2;
    offset = (offset + a - 1) / a * a;
    layout.sizes.push_back(size);
    layout.offsets.push_back(offset);
    offset += size;
  }
  layout.total = offset;
  return layout;
}

ParamLayout MakeParamLayout(const CubinKernel& kernel) {
  ParamLayout layout;
  for (const CubinParam& p : kernel.params) {
    layout.sizes.push_back(p.size);
    layout.offsets.push_back(p.offset);
  }
  layout.total = kernel.param_bytes;
  return layout;
}

KernelEntry Function::entry() const {
  KernelEntry entry = entry_.load(std::memory_order_acquire);
  if (entry != nullptr) return entry;
  entry = FindHostKernel(name_, module_->image_object());
  if (entry != nullptr) {
    entry_.store(entry, std::memory_order_release);
    return entry;
  }
  std::call_once(missing_reported_, [this] {
    std::fprintf(stderr,
                 "memsim: kernel %s has no host implementation: define extern \"C\" void %s(void** "
                 "params) in a shared object listed in MEMSIM_KERNELS or in the process\n",
                 name_.c_str(), name_.c_str());
  });
  return nullptr;
}

std::shared_ptr<Module> Module::Load(const std::string& path, CUresult* error) {
  void* dl = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    *error = CUDA_ERROR_FILE_NOT_FOUND;
    return nullptr;
  }
  *error = CUDA_SUCCESS;
  return std::shared_ptr<Module>(new Module(dl, path));
}

std::shared_ptr<Module> Module::FromCubin(Cubin cubin, const void* image_object) {
  std::shared_ptr<Module> m(new Module(std::move(cubin.variables), image_object));
  for (const CubinKernel& k : cubin.kernels) {
    auto fn = std::make_unique<Function>(m.get(), k.name, nullptr, MakeParamLayout(k));
    if (m->functions_.count(k.name) != 0) continue;
    m->image_order_.push_back(fn.get());
    m->functions_.emplace(k.name, std::move(fn));
  }
  return m;
}

Module::~Module() {
  if (dl_ != nullptr) dlclose(dl_);
}

CUresult Module::GetFunction(const std::string& name, Function** out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(name);
  if (it != functions_.end()) {
    *out = it->second.get();
    return CUDA_SUCCESS;
  }
  if (dl_ == nullptr) return CUDA_ERROR_NOT_FOUND;
  void* entry = dlsym(dl_, name.c_str());
  const std::string layout_name = name + "__param_sizes";
  void* sizes = dlsym(dl_, layout_name.c_str());
  if (entry == nullptr || sizes == nullptr) return CUDA_ERROR_NOT_FOUND;
  auto fn = std::make_unique<Function>(this, name, reinterpret_cast<KernelEntry>(entry),
                                       MakeParamLayout(static_cast<const unsigned*>(sizes)));
  *out = fn.get();
  functions_.emplace(name, std::move(fn));
  return CUDA_SUCCESS;
}

CUresult Module::GetGlobal(const std::shared_ptr<Context>& ctx, const std::string& name,
                           void** address, size_t* size) {
  if (globals_ != nullptr) {
    uint64_t dptr = 0;
    if (CUresult r = globals_->Get(ctx, name, &dptr, size)) return r;
    *address = reinterpret_cast<void*>(dptr);
    return CUDA_SUCCESS;
  }
  void* sym = dlsym(dl_, name.c_str());
  if (sym == nullptr) return CUDA_ERROR_NOT_FOUND;
  *address = sym;
  const std::string size_name = name + "__size";
  void* sz = dlsym(dl_, size_name.c_str());
  *size = sz != nullptr ? *static_cast<const size_t*>(sz) : 0;
  return CUDA_SUCCESS;
}

std::vector<Function*> Module::Functions() {
  std::lock_guard<std::mutex> lock(mu_);
  if (dl_ == nullptr) return image_order_;
  std::vector<Function*> out;
  for (auto& [name, fn] : functions_) out.push_back(fn.get());
  return out;
}

void Module::ReleaseGlobals() {
  if (globals_ != nullptr) globals_->Release();
}

}  // namespace memsim

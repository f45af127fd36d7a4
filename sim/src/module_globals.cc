#include "module_globals.h"

#include <algorithm>
#include <cstring>

#include "driver.h"
#include "memory_ops.h"

namespace memsim {

namespace {

constexpr uint64_t kVariableAlignment = 256;

bool SameContext(const std::weak_ptr<Context>& a, const std::shared_ptr<Context>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}

}  // namespace

ModuleGlobals::ModuleGlobals(std::vector<CubinVariable> variables)
    : variables_(std::move(variables)) {
  for (const CubinVariable& v : variables_) {
    offsets_.push_back(bytes_);
    bytes_ += (v.size + kVariableAlignment - 1) / kVariableAlignment * kVariableAlignment;
  }
}

ModuleGlobals::~ModuleGlobals() { Release(); }

CUresult ModuleGlobals::Get(const std::shared_ptr<Context>& ctx, const std::string& name,
                            uint64_t* address, size_t* size) {
  size_t index = 0;
  while (index < variables_.size() && variables_[index].name != name) ++index;
  if (index == variables_.size()) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(mu_);
  // Copies of destroyed contexts went with their memory.
  copies_.erase(
      std::remove_if(copies_.begin(), copies_.end(), [](const Copy& c) { return c.ctx.expired(); }),
      copies_.end());
  uint64_t base = 0;
  for (const Copy& c : copies_) {
    if (SameContext(c.ctx, ctx)) base = c.base;
  }
  if (base == 0) {
    if (CUresult r =
            AllocateDeviceMemory(ctx.get(), std::max(bytes_, kVariableAlignment), nullptr, &base))
      return r;
    for (size_t i = 0; i < variables_.size(); ++i) {
      const CubinVariable& v = variables_[i];
      std::memcpy(reinterpret_cast<void*>(base + offsets_[i]), v.init.data(), v.init.size());
    }
    copies_.push_back(Copy{ctx, base});
  }
  *address = base + offsets_[index];
  *size = variables_[index].size;
  return CUDA_SUCCESS;
}

void ModuleGlobals::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Copy& c : copies_) {
    // A destroyed context freed its memory already (and the range may have been reused).
    std::shared_ptr<Context> ctx = c.ctx.lock();
    if (ctx != nullptr && Driver::Get().contexts.Get(ctx.get()) == ctx) FreeDeviceMemory(c.base);
  }
  copies_.clear();
}

}  // namespace memsim

#include "module_globals.h"

#include <algorithm>
#include <cstring>

#include "context.h"
#include "device.h"
#include "memory_ops.h"

namespace memsim {

namespace {

constexpr uint64_t kVariableAlignment = 256;

}  // namespace

ModuleGlobals::ModuleGlobals(std::vector<CubinVariable> variables)
    : variables_(std::move(variables)) {
  for (const CubinVariable& v : variables_) {
    offsets_.push_back(bytes_);
    bytes_ += (v.size + kVariableAlignment - 1) / kVariableAlignment * kVariableAlignment;
  }
}

ModuleGlobals::~ModuleGlobals() { Release(); }

bool ModuleGlobals::Live(const Copy& copy, const Context* ctx) {
  const std::shared_ptr<Context> owner = copy.ctx.lock();
  if (owner == nullptr || (ctx != nullptr && owner.get() != ctx)) return false;
  const auto range = owner->device()->va().Lookup(copy.base);
  return range && range->kind == RangeInfo::Kind::kClassic && range->base == copy.base &&
         range->buffer_id == copy.buffer_id && range->owner == owner.get();
}

CUresult ModuleGlobals::Get(const std::shared_ptr<Context>& ctx, const std::string& name,
                            uint64_t* address, size_t* size) {
  size_t index = 0;
  while (index < variables_.size() && variables_[index].name != name) ++index;
  if (index == variables_.size()) return CUDA_ERROR_NOT_FOUND;
  std::lock_guard<std::mutex> lock(mu_);
  // Copies whose memory went with their context (destroyed, or a primary context reset).
  copies_.erase(std::remove_if(copies_.begin(), copies_.end(),
                               [](const Copy& c) { return !Live(c, nullptr); }),
                copies_.end());
  uint64_t base = 0;
  for (const Copy& c : copies_) {
    if (Live(c, ctx.get())) base = c.base;
  }
  if (base == 0) {
    const uint64_t bytes = std::max(bytes_, kVariableAlignment);
    if (CUresult r = AllocateDeviceMemory(ctx.get(), bytes, nullptr, &base)) return r;
    for (size_t i = 0; i < variables_.size(); ++i) {
      const CubinVariable& v = variables_[i];
      std::memcpy(reinterpret_cast<void*>(base + offsets_[i]), v.init.data(), v.init.size());
    }
    const auto range = ctx->device()->va().Lookup(base);
    copies_.push_back(Copy{ctx, base, range ? range->buffer_id : 0});
  }
  *address = base + offsets_[index];
  *size = variables_[index].size;
  return CUDA_SUCCESS;
}

void ModuleGlobals::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Copy& c : copies_) {
    if (Live(c, nullptr)) FreeDeviceMemory(c.base);
  }
  copies_.clear();
}

}  // namespace memsim

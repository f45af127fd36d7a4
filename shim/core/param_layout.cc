#include "shim/core/param_layout.h"

#include "shim/core/log.h"

namespace memvirt::shim {

CUresult ParamLayoutCache::Info(Source source, CUfunction function, size_t index, size_t* offset,
                                size_t* size) const {
  if (source == Source::kFunction) {
    if (driver_->cuFuncGetParamInfo == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    return driver_->cuFuncGetParamInfo(function, index, offset, size);
  }
  if (driver_->cuKernelGetParamInfo == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return driver_->cuKernelGetParamInfo(reinterpret_cast<CUkernel>(function), index, offset, size);
}

ParamLayoutCache::Source ParamLayoutCache::SourceOf(CUfunction function, size_t* offset,
                                                    size_t* size, CUresult* first) const {
  const CUresult as_function = Info(Source::kFunction, function, 0, offset, size);
  if (as_function == CUDA_SUCCESS) {
    *first = as_function;
    return Source::kFunction;
  }
  const CUresult as_kernel = Info(Source::kKernel, function, 0, offset, size);
  if (as_function == CUDA_ERROR_INVALID_VALUE && as_kernel == CUDA_ERROR_INVALID_HANDLE) {
    *first = as_function;  // a function without parameters
    return Source::kFunction;
  }
  *first = as_kernel;  // a kernel (or unknown: then opaque)
  return Source::kKernel;
}

const ParamLayout& ParamLayoutCache::LookUp(CUfunction function) {
  auto [it, inserted] = layouts_.try_emplace(function);
  last_function_ = function;
  last_layout_ = &it->second;  // node-based map: stable address
  if (!inserted) return it->second;
  ParamLayout& layout = it->second;
  size_t offset = 0, size = 0;
  CUresult r = CUDA_SUCCESS;
  const Source source = SourceOf(function, &offset, &size, &r);
  for (size_t i = 0;; ++i) {
    if (i > 0) r = Info(source, function, i, &offset, &size);
    if (r == CUDA_SUCCESS) {
      layout.params.emplace_back(static_cast<uint32_t>(offset), static_cast<uint32_t>(size));
      for (size_t off = 0; off + sizeof(uint64_t) <= size; off += sizeof(uint64_t)) {
        layout.words.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(off)});
      }
      continue;
    }
    layout.known = r == CUDA_ERROR_INVALID_VALUE;  // past the last parameter
    break;
  }
  for (const auto& param : layout.params) layout.aggregates |= param.second > sizeof(uint64_t);
  layout.one_word_each = layout.words.size() == layout.params.size();
  for (size_t k = 0; k < layout.words.size() && layout.one_word_each; ++k) {
    layout.one_word_each = layout.words[k].param == k && layout.words[k].offset == 0;
  }
  const char* call = source == Source::kFunction ? "cuFuncGetParamInfo" : "cuKernelGetParamInfo";
  if (!layout.known) {
    ++counts_.undecodable;
    MEMSHIM_LOG(kInfo, "kernel %p: no parameter information (%s: %d); its launches are opaque",
                static_cast<void*>(function), call, r);
  } else {
    ++(source == Source::kFunction ? counts_.decoded_as_function : counts_.decoded_as_kernel);
    MEMSHIM_LOG(kInfo, "kernel %p: %zu parameters, %zu argument words (%s)",
                static_cast<void*>(function), layout.params.size(), layout.words.size(), call);
  }
  return layout;
}

}  // namespace memvirt::shim

#include "proc_address.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api_common.h"

namespace memsim {

namespace {

struct ProcEntry {
  const char* name;
  int version;
  void* fn;
  bool per_thread;
};

#define MEMSIM_PROC(name, version, symbol, per_thread) \
  {name, version, reinterpret_cast<void*>(&symbol), per_thread},

const ProcEntry kProcTable[] = {
#include "proc_address_table.inc"
};

#undef MEMSIM_PROC

// MEMSIM_LOG_PROC_MISSES=1 reports every name asked for that the sim does not export: what a
// program would miss on the sim (read once; cuGetProcAddress may be called before cuInit).
void ReportMiss(const char* symbol, int cuda_version, cuuint64_t flags, bool name_known) {
  static const bool enabled = [] {
    const char* v = std::getenv("MEMSIM_LOG_PROC_MISSES");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  if (!enabled) return;
  std::fprintf(stderr, "memsim: cuGetProcAddress(\"%s\", %d, flags %llu): %s\n", symbol,
               cuda_version, static_cast<unsigned long long>(flags),
               name_known ? "no flavour at this version" : "not exported");
}

}  // namespace

CUresult LookupProcAddress(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn,
                           CUdriverProcAddressQueryResult* status) {
  const bool want_per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  bool name_known = false;
  bool has_per_thread = false;
  for (const ProcEntry& e : kProcTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    name_known = true;
    has_per_thread = has_per_thread || e.per_thread;
  }
  // Note [per-thread flavours]: a name with per-thread flavours answers the per-thread flag
  // only from the version of its first one (7000): below it, VERSION_NOT_SUFFICIENT, as a
  // driver 580 answers; a name without them answers with its plain flavour.
  const bool per_thread = want_per_thread && has_per_thread;
  const ProcEntry* best = nullptr;
  for (const ProcEntry& e : kProcTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (e.per_thread != per_thread || e.version > cuda_version) continue;
    if (best == nullptr || e.version > best->version) best = &e;
  }
  if (best == nullptr) {
    ReportMiss(symbol, cuda_version, flags, name_known);
    *pfn = nullptr;
    if (status != nullptr) {
      *status = name_known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                           : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_SUCCESS;  // documented: success with a null pointer, the status says why
  }
  *pfn = best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace memsim

extern "C" {

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const cuuint64_t known =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Documented, and so answered by a driver 580: a version newer than the driver's is invalid
  // (the outputs are left alone).
  if (cudaVersion > CUDA_VERSION) return CUDA_ERROR_INVALID_VALUE;
  return memsim::LookupProcAddress(symbol, cudaVersion, flags, pfn, status);
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"

// The two indirect ways to reach the driver: cuGetProcAddress (what cudart
// and PyTorch use) and dlsym/dlvsym on libcuda (what frameworks use).
//
// Note [entry-point substitution]
//   The real lookup runs first: it decides whether the name exists at the
//   requested version (its error and status are the answer otherwise). On
//   success the answer is the hook of the flavour that the generated table
//   names for (name, version, per-thread flag) (Note [entry-point flavours]
//   in entry_point_table.h), whatever address the driver handed out (a
//   driver may answer with an internal address that is no export), so the
//   ABI the caller asked for is the ABI it gets, at every version: 4000 for
//   cuLaunchKernel is cuLaunchKernel, 2000 for cuMemAlloc the 32-bit
//   cuMemAlloc (Note [32-bit entry points] in hooks_legacy32.cc). hook_list.h
//   hooks every flavour of each entry point it hooks at all, so no version
//   of a hooked name is passed through; a name the table does not know is
//   substituted by address, and names the shim does not hook are returned
//   unchanged. dlsym/dlvsym name one flavour exactly and are substituted by
//   address.
#include <dlfcn.h>

#include "shim/hooks/hook_util.h"
#include "shim/hooks/libc_symbols.h"

using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::NextSymbol;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::RealDlsym;
using memvirt::shim::hooks::RealDlvsym;
using memvirt::shim::hooks::Runtime;

namespace {

void* SubstituteIfReady(void* p) {
  Runtime& rt = Runtime::Get();
  return rt.ready() ? rt.Substitute(p) : p;
}

void* SubstituteProcIfReady(const char* symbol, void* p, int version, cuuint64_t flags) {
  Runtime& rt = Runtime::Get();
  return rt.ready() ? rt.SubstituteProc(symbol, p, version, flags) : p;
}

bool LooksLikeDriverSymbol(const char* name) {
  return name != nullptr && name[0] == 'c' && name[1] == 'u';
}

}  // namespace

MEMSHIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags) {
  CUresult r = Forward(Real().cuGetProcAddress, symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteProcIfReady(symbol, *pfn, version, flags);
  }
  return r;
}

MEMSHIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                            cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* status) {
  CUresult r = Forward(Real().cuGetProcAddress_v2, symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = SubstituteProcIfReady(symbol, *pfn, version, flags);
  }
  return r;
}

MEMSHIM_EXPORT void* dlsym(void* handle, const char* name) {
  void* p = nullptr;
  if (handle == RTLD_NEXT) {
    p = NextSymbol(__builtin_return_address(0), name, nullptr);
  } else if (auto real = RealDlsym()) {
    p = real(handle, name);
  }
  return p != nullptr && LooksLikeDriverSymbol(name) ? SubstituteIfReady(p) : p;
}

MEMSHIM_EXPORT void* dlvsym(void* handle, const char* name, const char* version) {
  void* p = nullptr;
  if (handle == RTLD_NEXT) {
    p = NextSymbol(__builtin_return_address(0), name, version);
  } else if (auto real = RealDlvsym()) {
    p = real(handle, name, version);
  }
  return p != nullptr && LooksLikeDriverSymbol(name) ? SubstituteIfReady(p) : p;
}

// cuGetProcAddress: maps (base symbol name, CUDA version, stream flavour) to an entry point.
//
// Note [versioned lookup]: callers ask for the base name ("cuMemAlloc") and the CUDA version
// they were built for; the answer is the newest flavour introduced at or before that version
// (cuMemAlloc at 3020 or later is cuMemAlloc_v2). With
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the per-thread default-stream flavour (_ptds/_ptsz)
// is the answer for names that have one (Note [per-thread flavours] in proc_address.cc).
//
// Thread safety: the table is constant.
#ifndef MEMSIM_SRC_PROC_ADDRESS_H_
#define MEMSIM_SRC_PROC_ADDRESS_H_

#include "cuda_api.h"

namespace memsim {

// Returns CUDA_SUCCESS and *pfn; *pfn is null when there is no flavour, and *status tells
// whether the symbol is unknown or only newer than `cuda_version` (as documented for
// cuGetProcAddress and answered by a driver 580: tests/gpu/reference/).
CUresult LookupProcAddress(const char* symbol, int cuda_version, cuuint64_t flags, void** pfn,
                           CUdriverProcAddressQueryResult* status);

}  // namespace memsim

#endif  // MEMSIM_SRC_PROC_ADDRESS_H_

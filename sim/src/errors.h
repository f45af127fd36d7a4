// Names and descriptions of CUresult values (cuGetErrorName / cuGetErrorString).
//
// Thread safety: pure functions over a constant table.
#ifndef MEMSIM_SRC_ERRORS_H_
#define MEMSIM_SRC_ERRORS_H_

#include "cuda_api.h"

namespace memsim {

// nullptr for values that are not a CUresult of cuda.h.
const char* ErrorName(CUresult code);
const char* ErrorString(CUresult code);

int ErrorCount();
CUresult ErrorCodeAt(int index);  // REQUIRES: 0 <= index < ErrorCount()

}  // namespace memsim

#endif  // MEMSIM_SRC_ERRORS_H_

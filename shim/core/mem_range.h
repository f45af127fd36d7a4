// A byte range of device memory that an operation may touch.
#ifndef MEMVIRT_SHIM_CORE_MEM_RANGE_H_
#define MEMVIRT_SHIM_CORE_MEM_RANGE_H_

#include <cuda.h>

#include <cstdint>

namespace memvirt::shim {

struct MemRange {
  CUdeviceptr ptr = 0;
  uint64_t bytes = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_MEM_RANGE_H_

// Exported entry points the sim does not implement: they return CUDA_ERROR_NOT_SUPPORTED so
// that a caller gets a clear error instead of an unresolved symbol. docs/sim.md lists them.
//
// Note [32-bit legacy entry points]: the pre-CUDA-3.2 flavours (cuMemAlloc, cuMemcpyHtoD, ... with
// 32-bit CUdeviceptr_v1) cannot represent the sim's 64-bit device addresses; cuda.h has mapped
// every call to the _v2 flavours since CUDA 3.2.
#include "api_common.h"

#define MEMSIM_NOT_SUPPORTED(name, params) \
  CUresult CUDAAPI name params { return CUDA_ERROR_NOT_SUPPORTED; }

extern "C" {

// 32-bit legacy memory API.
MEMSIM_NOT_SUPPORTED(cuMemGetInfo, (unsigned int*, unsigned int*))
MEMSIM_NOT_SUPPORTED(cuMemAlloc, (CUdeviceptr_v1*, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemAllocPitch,
                     (CUdeviceptr_v1*, unsigned int*, unsigned int, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemFree, (CUdeviceptr_v1))
MEMSIM_NOT_SUPPORTED(cuMemGetAddressRange, (CUdeviceptr_v1*, unsigned int*, CUdeviceptr_v1))
MEMSIM_NOT_SUPPORTED(cuMemAllocHost, (void**, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemHostGetDevicePointer, (CUdeviceptr_v1*, void*, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyHtoD, (CUdeviceptr_v1, const void*, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoH, (void*, CUdeviceptr_v1, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoD, (CUdeviceptr_v1, CUdeviceptr_v1, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyHtoDAsync, (CUdeviceptr_v1, const void*, unsigned int, CUstream))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoHAsync, (void*, CUdeviceptr_v1, unsigned int, CUstream))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoDAsync, (CUdeviceptr_v1, CUdeviceptr_v1, unsigned int, CUstream))
MEMSIM_NOT_SUPPORTED(cuMemcpy2D, (const CUDA_MEMCPY2D_v1*))
MEMSIM_NOT_SUPPORTED(cuMemcpy2DUnaligned, (const CUDA_MEMCPY2D_v1*))
MEMSIM_NOT_SUPPORTED(cuMemcpy2DAsync, (const CUDA_MEMCPY2D_v1*, CUstream))
MEMSIM_NOT_SUPPORTED(cuMemsetD8, (CUdeviceptr_v1, unsigned char, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemsetD16, (CUdeviceptr_v1, unsigned short, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemsetD32, (CUdeviceptr_v1, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemsetD2D8,
                     (CUdeviceptr_v1, unsigned int, unsigned char, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemsetD2D16,
                     (CUdeviceptr_v1, unsigned int, unsigned short, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemsetD2D32,
                     (CUdeviceptr_v1, unsigned int, unsigned int, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpy3D, (const CUDA_MEMCPY3D_v1*))
MEMSIM_NOT_SUPPORTED(cuMemcpy3DAsync, (const CUDA_MEMCPY3D_v1*, CUstream))
MEMSIM_NOT_SUPPORTED(cuModuleGetGlobal, (CUdeviceptr_v1*, unsigned int*, CUmodule, const char*))

// CUDA arrays and 3D copies.
MEMSIM_NOT_SUPPORTED(cuMemcpy3D_v2, (const CUDA_MEMCPY3D*))
MEMSIM_NOT_SUPPORTED(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D*))
MEMSIM_NOT_SUPPORTED(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D*, CUstream))
MEMSIM_NOT_SUPPORTED(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D*, CUstream))
MEMSIM_NOT_SUPPORTED(cuArrayDestroy, (CUarray))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoA, (CUarray, unsigned int, CUdeviceptr_v1, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyAtoD, (CUdeviceptr_v1, CUarray, unsigned int, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoA_v2, (CUarray, size_t, CUdeviceptr, size_t))
MEMSIM_NOT_SUPPORTED(cuMemcpyDtoA_v2_ptds, (CUarray, size_t, CUdeviceptr, size_t))
MEMSIM_NOT_SUPPORTED(cuMemcpyAtoD_v2, (CUdeviceptr, CUarray, size_t, size_t))
MEMSIM_NOT_SUPPORTED(cuMemcpyAtoD_v2_ptds, (CUdeviceptr, CUarray, size_t, size_t))

// Managed memory, IPC, imported handles.
MEMSIM_NOT_SUPPORTED(cuMemAllocManaged, (CUdeviceptr*, size_t, unsigned int))
MEMSIM_NOT_SUPPORTED(cuMemGetHandleForAddressRange,
                     (void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long))

// Graph updates, parameter changes of nodes and executable graphs (graphs are immutable here).
MEMSIM_NOT_SUPPORTED(cuGraphKernelNodeSetParams, (CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*))
MEMSIM_NOT_SUPPORTED(cuGraphKernelNodeSetParams_v2,
                     (CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v2*))
MEMSIM_NOT_SUPPORTED(cuGraphExecKernelNodeSetParams,
                     (CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*))
MEMSIM_NOT_SUPPORTED(cuGraphExecKernelNodeSetParams_v2,
                     (CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v2*))
MEMSIM_NOT_SUPPORTED(cuGraphExecMemcpyNodeSetParams,
                     (CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*, CUcontext))
MEMSIM_NOT_SUPPORTED(cuGraphExecMemsetNodeSetParams,
                     (CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*, CUcontext))
MEMSIM_NOT_SUPPORTED(cuGraphExecChildGraphNodeSetParams, (CUgraphExec, CUgraphNode, CUgraph))
MEMSIM_NOT_SUPPORTED(cuGraphExecNodeSetParams, (CUgraphExec, CUgraphNode, CUgraphNodeParams*))
MEMSIM_NOT_SUPPORTED(cuGraphExecUpdate,
                     (CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*))
MEMSIM_NOT_SUPPORTED(cuGraphExecUpdate_v2, (CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*))

}  // extern "C"

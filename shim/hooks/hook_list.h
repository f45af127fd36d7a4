// Every driver entry point libmemshim.so exports, as an X-list. Each name is
// defined once (hooks_*.cc) with the exact prototype cuda.h gives it when
// compiled with __CUDA_API_VERSION_INTERNAL, and each hook forwards to the
// entry point of the same name in the real libcuda.so.1.
#ifndef MEMVIRT_SHIM_HOOKS_HOOK_LIST_H_
#define MEMVIRT_SHIM_HOOKS_HOOK_LIST_H_

// clang-format off
#define MEMSHIM_HOOKED_FUNCTIONS(X)                                                                \
  /* memory management */                                                                          \
  X(cuMemAlloc_v2) X(cuMemAllocPitch_v2) X(cuMemFree_v2) X(cuMemAllocAsync)                        \
  X(cuMemAllocAsync_ptsz) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz)               \
  X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuMemGetInfo_v2) X(cuMemGetAddressRange_v2)           \
  X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuMemCreate) X(cuMemRelease)                \
  X(cuMemRetainAllocationHandle) X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap)            \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationPropertiesFromHandle)                        \
  X(cuMemExportToShareableHandle)                                                                  \
  /* legacy IPC */                                                                                 \
  X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcOpenMemHandle_v2) X(cuIpcCloseMemHandle)       \
  /* launches */                                                                                   \
  X(cuLaunchKernel) X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)            \
  X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz) X(cuGraphLaunch)                  \
  X(cuGraphLaunch_ptsz)                                                                            \
  /* graphs */                                                                                     \
  X(cuGraphInstantiate) X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithFlags)                    \
  X(cuGraphInstantiateWithParams) X(cuGraphInstantiateWithParams_ptsz) X(cuGraphExecDestroy)       \
  X(cuGraphExecUpdate) X(cuGraphExecUpdate_v2) X(cuGraphExecKernelNodeSetParams)                   \
  X(cuGraphExecKernelNodeSetParams_v2) X(cuGraphExecMemcpyNodeSetParams)                           \
  X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecChildGraphNodeSetParams)                          \
  X(cuGraphExecNodeSetParams)                                                                      \
  /* copies */                                                                                     \
  X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) X(cuMemcpyHtoD_v2)           \
  X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2)            \
  X(cuMemcpyDtoD_v2_ptds) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz)                     \
  X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) X(cuMemcpyDtoDAsync_v2)                     \
  X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2)    \
  X(cuMemcpy2DUnaligned_v2_ptds) X(cuMemcpy2DAsync_v2) X(cuMemcpy2DAsync_v2_ptsz)                  \
  X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds) X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz)          \
  X(cuMemcpyPeer) X(cuMemcpyPeer_ptds) X(cuMemcpyPeerAsync) X(cuMemcpyPeerAsync_ptsz)              \
  X(cuMemcpy3DPeer) X(cuMemcpy3DPeer_ptds) X(cuMemcpy3DPeerAsync) X(cuMemcpy3DPeerAsync_ptsz)      \
  X(cuMemcpyBatchAsync) X(cuMemcpyBatchAsync_ptsz) X(cuMemcpyBatchAsync_v2)                        \
  X(cuMemcpyBatchAsync_v2_ptsz) X(cuMemcpy3DBatchAsync) X(cuMemcpy3DBatchAsync_ptsz)               \
  X(cuMemcpy3DBatchAsync_v2) X(cuMemcpy3DBatchAsync_v2_ptsz) X(cuMemcpyDtoA_v2)                    \
  X(cuMemcpyDtoA_v2_ptds) X(cuMemcpyAtoD_v2) X(cuMemcpyAtoD_v2_ptds)                               \
  /* memsets */                                                                                    \
  X(cuMemsetD8_v2) X(cuMemsetD8_v2_ptds) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds)                  \
  X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds)              \
  X(cuMemsetD2D16_v2) X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds)        \
  X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz)          \
  X(cuMemsetD32Async) X(cuMemsetD32Async_ptsz) X(cuMemsetD2D8Async) X(cuMemsetD2D8Async_ptsz)      \
  X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) X(cuMemsetD2D32Async)                           \
  X(cuMemsetD2D32Async_ptsz)                                                                       \
  /* streams and capture */                                                                        \
  X(cuStreamDestroy) X(cuStreamDestroy_v2) X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz)    \
  X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz) X(cuStreamEndCapture)                 \
  X(cuStreamEndCapture_ptsz)                                                                       \
  /* stream memory operations */                                                                   \
  X(cuStreamWriteValue32) X(cuStreamWriteValue32_v2) X(cuStreamWriteValue32_ptsz)                  \
  X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64) X(cuStreamWriteValue64_v2)               \
  X(cuStreamWriteValue64_ptsz) X(cuStreamWriteValue64_v2_ptsz) X(cuStreamWaitValue32)              \
  X(cuStreamWaitValue32_v2) X(cuStreamWaitValue32_ptsz) X(cuStreamWaitValue32_v2_ptsz)             \
  X(cuStreamWaitValue64) X(cuStreamWaitValue64_v2) X(cuStreamWaitValue64_ptsz)                     \
  X(cuStreamWaitValue64_v2_ptsz) X(cuStreamBatchMemOp) X(cuStreamBatchMemOp_v2)                    \
  X(cuStreamBatchMemOp_ptsz) X(cuStreamBatchMemOp_v2_ptsz)                                         \
  /* 32-bit flavours (Note [32-bit entry points] in hooks_legacy32.cc) */                            \
  X(cuMemGetInfo) X(cuMemAlloc) X(cuMemAllocPitch) X(cuMemFree) X(cuMemGetAddressRange)            \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)        \
  X(cuMemcpyDtoDAsync) X(cuMemcpy2D) X(cuMemcpy2DUnaligned) X(cuMemcpy2DAsync) X(cuMemcpy3D)       \
  X(cuMemcpy3DAsync) X(cuMemsetD8) X(cuMemsetD16) X(cuMemsetD32) X(cuMemsetD2D8) X(cuMemsetD2D16)  \
  X(cuMemsetD2D32) X(cuMemcpyDtoA) X(cuMemcpyAtoD)                                                \
  /* entry-point lookup */                                                                         \
  X(cuGetProcAddress) X(cuGetProcAddress_v2)
// clang-format on

#endif  // MEMVIRT_SHIM_HOOKS_HOOK_LIST_H_

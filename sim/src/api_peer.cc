// Exported entry points: peer access between contexts of different devices. Every pair of
// distinct simulated devices can access each other (cuDeviceCanAccessPeer); enabling access is
// bookkeeping with the documented errors, since the sim's memory is host memory that every
// context can reach.
#include "api_common.h"

using memsim::Context;
using memsim::Device;
using namespace memsim::api;

namespace {

CUresult PeerContext(CUcontext handle, std::shared_ptr<Context>* ctx,
                     std::shared_ptr<Context>* peer) {
  if (CUresult r = CurrentContext(ctx)) return r;
  *peer = D().contexts.Get(handle);
  return *peer ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  std::shared_ptr<Context> ctx, peer;
  if (CUresult r = PeerContext(peerContext, &ctx, &peer)) return r;
  if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (ctx->device() == peer->device()) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  return ctx->EnablePeer(*peer) ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext) {
  std::shared_ptr<Context> ctx, peer;
  if (CUresult r = PeerContext(peerContext, &ctx, &peer)) return r;
  return ctx->DisablePeer(*peer) ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib,
                                         CUdevice srcDevice, CUdevice dstDevice) {
  Device* src;
  Device* dst;
  if (CUresult r = ResolveDevice(srcDevice, &src)) return r;
  if (CUresult r = ResolveDevice(dstDevice, &dst)) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (src == dst) return CUDA_ERROR_INVALID_DEVICE;
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
      *value = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
      *value = 1;
      return CUDA_SUCCESS;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:  // the sim has no CUDA arrays
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

}  // extern "C"

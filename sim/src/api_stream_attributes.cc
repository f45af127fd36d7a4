// Exported entry points: stream attributes (cuStreamGetAttribute / SetAttribute /
// CopyAttributes). The sim keeps the values a program sets and answers them back; none of them
// changes how the sim runs work (access policy windows, synchronization policy and memory
// synchronization domains tune a GPU's caches and scheduling).
#include <cstring>

#include "api_common.h"

using memsim::Context;
using memsim::Stream;
using namespace memsim::api;

namespace {

bool IsStreamAttribute(CUstreamAttrID id) {
  switch (id) {
    case CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_STREAM_ATTRIBUTE_PRIORITY:
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN:
      return true;
    default:
      return false;
  }
}

// The value of an attribute the program never set.
CUstreamAttrValue DefaultValue(const Stream& stream, CUstreamAttrID id) {
  CUstreamAttrValue value;
  std::memset(&value, 0, sizeof(value));
  switch (id) {
    case CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      value.syncPolicy = CU_SYNC_POLICY_AUTO;
      break;
    case CU_STREAM_ATTRIBUTE_PRIORITY:
      value.priority = stream.priority();
      break;
    case CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      value.memSyncDomainMap.default_ = 0;
      value.memSyncDomainMap.remote = 1;
      break;
    default:
      break;
  }
  return value;
}

CUstreamAttrValue ValueOf(Stream& stream, CUstreamAttrID id) {
  CUstreamAttrValue value;
  if (!stream.GetAttribute(id, &value)) value = DefaultValue(stream, id);
  return value;
}

CUresult GetAttribute(CUstream h, CUstreamAttrID id, CUstreamAttrValue* out, bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, per_thread, &ctx, &stream)) return r;
  if (out == nullptr || !IsStreamAttribute(id)) return CUDA_ERROR_INVALID_VALUE;
  *out = ValueOf(*stream, id);
  return CUDA_SUCCESS;
}

CUresult SetAttribute(CUstream h, CUstreamAttrID id, const CUstreamAttrValue* value,
                      bool per_thread) {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<Stream> stream;
  if (CUresult r = ResolveStream(h, per_thread, &ctx, &stream)) return r;
  if (value == nullptr || !IsStreamAttribute(id)) return CUDA_ERROR_INVALID_VALUE;
  if (id == CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
      (value->syncPolicy < CU_SYNC_POLICY_AUTO ||
       value->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (id == CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW &&
      (value->accessPolicyWindow.hitRatio < 0.0f || value->accessPolicyWindow.hitRatio > 1.0f)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  stream->SetAttribute(id, *value);
  return CUDA_SUCCESS;
}

CUresult CopyAttributes(CUstream dst_handle, CUstream src_handle, bool per_thread) {
  std::shared_ptr<Context> dst_ctx, src_ctx;
  std::shared_ptr<Stream> dst, src;
  if (CUresult r = ResolveStream(dst_handle, per_thread, &dst_ctx, &dst)) return r;
  if (CUresult r = ResolveStream(src_handle, per_thread, &src_ctx, &src)) return r;
  for (CUstreamAttrID id :
       {CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY,
        CU_STREAM_ATTRIBUTE_PRIORITY, CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
        CU_STREAM_ATTRIBUTE_MEM_SYNC_DOMAIN}) {
    dst->SetAttribute(id, ValueOf(*src, id));
  }
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuStreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* v) {
  return GetAttribute(h, attr, v, false);
}
CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* v) {
  return GetAttribute(h, attr, v, true);
}
CUresult CUDAAPI cuStreamSetAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* v) {
  return SetAttribute(h, attr, v, false);
}
CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID attr,
                                           const CUstreamAttrValue* v) {
  return SetAttribute(h, attr, v, true);
}
CUresult CUDAAPI cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return CopyAttributes(dst, src, false);
}
CUresult CUDAAPI cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return CopyAttributes(dst, src, true);
}

}  // extern "C"

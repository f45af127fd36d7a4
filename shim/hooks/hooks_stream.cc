// Stream lifetime and capture bookkeeping.
#include "shim/hooks/hook_util.h"

using memvirt::shim::ShimCore;
using memvirt::shim::hooks::Forward;
using memvirt::shim::hooks::Real;
using memvirt::shim::hooks::Runtime;

namespace {

// Every core may track the stream (Note [core routing] in runtime.h).
void Retire(CUstream stream) {
  Runtime::Get().ForEachCore([stream](ShimCore* core) { core->OnStreamDestroy(stream, false); });
}

void CaptureBegins(CUstream stream, bool per_thread) {
  if (ShimCore* core = Runtime::Get().core()) core->OnCaptureBegin(stream, per_thread);
}

void CaptureEnds(CUresult r) {
  (void)r;
  if (ShimCore* core = Runtime::Get().core()) core->OnCaptureEnd();
}

}  // namespace

MEMSHIM_EXPORT CUresult cuStreamDestroy(CUstream stream) {
  Retire(stream);
  return Forward(Real().cuStreamDestroy, stream);
}

MEMSHIM_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  Retire(stream);
  return Forward(Real().cuStreamDestroy_v2, stream);
}

MEMSHIM_EXPORT CUresult cuStreamBeginCapture(CUstream stream) {
  CaptureBegins(stream, false);
  return Forward(Real().cuStreamBeginCapture, stream);
}

MEMSHIM_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  CaptureBegins(stream, true);
  return Forward(Real().cuStreamBeginCapture_ptsz, stream);
}

MEMSHIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  CaptureBegins(stream, false);
  return Forward(Real().cuStreamBeginCapture_v2, stream, mode);
}

MEMSHIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  CaptureBegins(stream, true);
  return Forward(Real().cuStreamBeginCapture_v2_ptsz, stream, mode);
}

MEMSHIM_EXPORT CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  CUresult r = Forward(Real().cuStreamEndCapture, stream, graph);
  CaptureEnds(r);
  return r;
}

MEMSHIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  CUresult r = Forward(Real().cuStreamEndCapture_ptsz, stream, graph);
  CaptureEnds(r);
  return r;
}

#include "shim/core/ipc_import.h"

#include <unistd.h>

#include <cstdint>

#include "shim/core/config.h"
#include "shim/core/log.h"
#include "shim/core/relaxed_capture_mode.h"

namespace memvirt::shim {

namespace {

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

}  // namespace

CUresult IpcImporter::Open(const ShimIpcHandle& handle, unsigned int flags, CUdeviceptr* out) {
  CUcontext context = nullptr;
  if (driver_->cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (out == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (handle.pid == static_cast<uint32_t>(getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  uint64_t end = 0;  // a handle is application input: checked before anything is asked of it
  if (handle.chunks == 0 || handle.chunks > (uint64_t{1} << 20) || handle.bytes == 0 ||
      __builtin_add_overflow(handle.offset, handle.bytes, &end) ||
      end > (handle.chunks << kChunkShift)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  MutexLock lock(&mu_);
  for (Import& import : imports_) {
    if (import.context == context && import.pid == handle.pid &&
        import.listener == handle.listener && import.export_id == handle.export_id) {
      ++import.refs;
      *out = import.ptr;
      return CUDA_SUCCESS;
    }
  }
  const int sock = ConnectIpc(IpcSocketName(handle.pid, handle.listener));
  if (sock < 0) return CUDA_ERROR_MAP_FAILED;  // the exporter is gone
  Import import;
  import.context = context;
  import.pid = handle.pid;
  import.listener = handle.listener;
  import.export_id = handle.export_id;
  import.sock = sock;
  const CUresult r = MapChunks(sock, handle, &import);
  if (r != CUDA_SUCCESS) {
    close(sock);
    return r;
  }
  import.refs = 1;
  imports_.push_back(import);
  *out = import.ptr;
  return CUDA_SUCCESS;
}

CUresult IpcImporter::MapChunks(int sock, const ShimIpcHandle& handle, Import* import) {
  const IpcOpenRequest request{handle.export_id, handle.token};
  if (!SendWithFds(sock, &request, sizeof(request), nullptr, 0)) return CUDA_ERROR_MAP_FAILED;
  IpcOpenReply reply;
  std::vector<int> fds;
  if (!ReceiveWithFds(sock, &reply, sizeof(reply), &fds)) {
    CloseAll(fds);
    return CUDA_ERROR_MAP_FAILED;
  }
  if (reply.result != CUDA_SUCCESS || reply.chunks != handle.chunks || !fds.empty()) {
    CloseAll(fds);
    return reply.result != CUDA_SUCCESS ? static_cast<CUresult>(reply.result)
                                        : CUDA_ERROR_INVALID_VALUE;
  }
  while (fds.size() < reply.chunks) {
    uint32_t count = 0;
    const size_t before = fds.size();
    if (!ReceiveWithFds(sock, &count, sizeof(count), &fds) || fds.size() - before != count ||
        count == 0) {
      CloseAll(fds);
      return CUDA_ERROR_MAP_FAILED;
    }
  }
  if (fds.size() != handle.chunks || driver_->cuMemImportFromShareableHandle == nullptr) {
    CloseAll(fds);
    return fds.size() != handle.chunks ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_NOT_SUPPORTED;
  }
  CUdevice device = 0;
  CUresult r = driver_->cuCtxGetDevice(&device);
  const uint64_t bytes = handle.chunks << kChunkShift;
  CUdeviceptr va = 0;
  if (r == CUDA_SUCCESS) r = driver_->cuMemAddressReserve(&va, bytes, kChunkBytes, 0, 0);
  if (r != CUDA_SUCCESS) {
    CloseAll(fds);
    return r;
  }
  size_t mapped = 0;
  for (; mapped < fds.size() && r == CUDA_SUCCESS; ++mapped) {
    CUmemGenericAllocationHandle h = 0;
    r = driver_->cuMemImportFromShareableHandle(
        &h, reinterpret_cast<void*>(static_cast<intptr_t>(fds[mapped])),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) break;
    r = driver_->cuMemMap(va + (mapped << kChunkShift), kChunkBytes, 0, h, 0);
    driver_->cuMemRelease(h);  // the mapping keeps the memory
    if (r != CUDA_SUCCESS) break;
  }
  CloseAll(fds);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = driver_->cuMemSetAccess(va, bytes, &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    for (size_t i = 0; i < mapped; ++i) driver_->cuMemUnmap(va + (i << kChunkShift), kChunkBytes);
    driver_->cuMemAddressFree(va, bytes);
    MEMSHIM_LOG(kWarn, "cuIpcOpenMemHandle: mapping the exported chunks failed (%d)", r);
    return r;
  }
  import->reservation = va;
  import->reserved_bytes = bytes;
  import->ptr = va + handle.offset;
  return CUDA_SUCCESS;
}

CUresult IpcImporter::Close(CUdeviceptr ptr, bool* handled) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < imports_.size(); ++i) {
    Import& import = imports_[i];
    if (import.ptr != ptr) continue;
    *handled = true;
    if (--import.refs > 0) return CUDA_SUCCESS;
    // Note [unmap is immediate] (sim/src/api_vmm.cc): a driver's cuMemUnmap
    // does not wait, and work still using the range would fault; the
    // context's work is waited for first (relaxed: a capture elsewhere stays
    // valid). Then one unmap per chunk mapping (a driver unmaps whole
    // mappings only).
    CUresult result = CUDA_SUCCESS;
    if (driver_->cuCtxSynchronize != nullptr) {
      RelaxedCaptureMode relaxed(driver_);
      result = driver_->cuCtxSynchronize();  // a faulted context runs nothing more: unmap still
    }
    for (uint64_t off = 0; off < import.reserved_bytes; off += kChunkBytes) {
      const CUresult r = driver_->cuMemUnmap(import.reservation + off, kChunkBytes);
      if (r != CUDA_SUCCESS) result = r;
    }
    driver_->cuMemAddressFree(import.reservation, import.reserved_bytes);
    close(import.sock);  // the exporter unpins
    imports_.erase(imports_.begin() + static_cast<std::ptrdiff_t>(i));
    return result;
  }
  *handled = false;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace memvirt::shim

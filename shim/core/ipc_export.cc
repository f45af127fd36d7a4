#include "shim/core/ipc_export.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <thread>

#include "shim/core/config.h"
#include "shim/core/ipc_channel.h"
#include "shim/core/log.h"
#include "shim/driver/scoped_context.h"

namespace memvirt::shim {

namespace {

uint64_t Random64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) == static_cast<ssize_t>(sizeof(v)) && v != 0) return v;
  // No entropy source: still unique per process and call, not secret.
  static std::atomic<uint64_t> counter{0};
  const uint64_t now =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (now * 0x9e3779b97f4a7c15ull) ^ (static_cast<uint64_t>(getpid()) << 32) ^
         counter.fetch_add(1);
}

void CloseAll(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

}  // namespace

IpcExporter::IpcExporter(const Driver* driver) : driver_(driver) {}

CUresult IpcExporter::PinLocked(Record* record) {
  if (record->pinned) return CUDA_SUCCESS;
  const CUresult r = record->core->PinBlock(record->ptr, &record->block);
  if (r != CUDA_SUCCESS) return r;
  record->pinned = true;
  ++stats_.pinned;
  return CUDA_SUCCESS;
}

void IpcExporter::UnpinLocked(Record* record) {
  if (!record->pinned) return;
  record->core->UnpinBlock(record->block);
  record->pinned = false;
  --stats_.pinned;
  MEMSHIM_LOG(kDebug, "exported block %p unpinned", reinterpret_cast<void*>(record->ptr));
}

CUresult IpcExporter::ExportChunks(const Record& record, std::vector<int>* fds) {
  if (driver_->cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  for (CUmemGenericAllocationHandle h : record.block.chunks) {
    int fd = -1;
    const CUresult r =
        driver_->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) return r;
    fds->push_back(fd);
  }
  return CUDA_SUCCESS;
}

CUresult IpcExporter::Export(ShimCore* core, CUdeviceptr ptr, CUipcMemHandle* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  MutexLock lock(&mu_);
  uint64_t id = 0;
  auto found = by_ptr_.find(ptr);
  if (found != by_ptr_.end()) {
    id = found->second;
    if (CUresult r = PinLocked(&by_id_[id])) return r;
  } else {
    Record record;
    record.core = core;
    record.ptr = ptr;
    record.token = Random64();
    if (CUresult r = PinLocked(&record)) return r;
    // A device whose chunks cannot be exported is found out now, not by
    // the importer.
    std::vector<int> probe;
    Record first = record;
    first.block.chunks.resize(1);
    const CUresult exportable = ExportChunks(first, &probe);
    CloseAll(probe);
    if (exportable != CUDA_SUCCESS || !StartListenerLocked()) {
      UnpinLocked(&record);
      MEMSHIM_LOG(kWarn, "cuIpcGetMemHandle on shim memory: %s (%d)",
                  exportable != CUDA_SUCCESS ? "its chunks cannot be exported as file descriptors"
                                             : "no listener socket",
                  exportable);
      return exportable != CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_MAP_FAILED;
    }
    id = next_id_++;
    by_ptr_[ptr] = id;
    by_id_[id] = std::move(record);
    records_.fetch_add(1, std::memory_order_relaxed);
    ++stats_.exports;
  }
  const Record& record = by_id_[id];
  ShimIpcHandle h = {};
  std::memcpy(h.magic, kShimIpcMagic, sizeof(h.magic));
  h.version = kShimIpcVersion;
  h.pid = listener_pid_;
  h.listener = listener_;
  h.export_id = id;
  h.token = record.token;
  h.offset = record.block.offset;
  h.bytes = record.block.bytes;
  h.chunks = record.block.chunks.size();
  EncodeIpcHandle(h, out);
  return CUDA_SUCCESS;
}

bool IpcExporter::DeferFree(ShimCore* core, CUdeviceptr ptr) {
  if (records_.load(std::memory_order_relaxed) == 0) return false;
  MutexLock lock(&mu_);
  auto found = by_ptr_.find(ptr);
  if (found == by_ptr_.end()) return false;
  const uint64_t id = found->second;
  by_ptr_.erase(found);
  Record& record = by_id_[id];
  if (record.core != core) return false;
  if (record.opens > 0) {
    record.freed = true;  // freed at the last close (OnConnectionEnd)
    MEMSHIM_LOG(kInfo, "exported block %p freed while open in %u other process(es): deferred",
                reinterpret_cast<void*>(ptr), record.opens);
    return true;
  }
  UnpinLocked(&record);
  by_id_.erase(id);
  records_.fetch_sub(1, std::memory_order_relaxed);
  --stats_.exports;
  return false;
}

IpcExporter::Stats IpcExporter::stats() {
  MutexLock lock(&mu_);
  return stats_;
}

bool IpcExporter::StartListenerLocked() {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  if (listener_pid_ == pid) return true;  // (a forked child starts its own)
  const uint64_t nonce = Random64();
  const int fd = ListenIpc(IpcSocketName(pid, nonce));
  if (fd < 0) return false;
  try {
    std::thread(&IpcExporter::Listen, this, fd).detach();
  } catch (const std::system_error&) {
    close(fd);
    return false;
  }
  listener_pid_ = pid;
  listener_ = nonce;
  return true;
}

void IpcExporter::Listen(int listen_fd) {
  sigset_t all;  // the application's signal handlers never run here
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  std::vector<Connection> conns;
  std::vector<pollfd> polled;
  for (;;) {
    polled.assign(1, pollfd{listen_fd, POLLIN, 0});
    for (const Connection& c : conns) polled.push_back(pollfd{c.fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), -1) < 0) {
      if (errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    // Connections first (indices of `polled` follow `conns` until it changes).
    for (size_t i = conns.size(); i-- > 0;) {
      const short events = polled[i + 1].revents;
      if (events == 0) continue;
      const bool keep = conns[i].export_id == 0 && (events & POLLIN) && Serve(&conns[i]);
      if (keep) continue;
      OnConnectionEnd(conns[i]);
      close(conns[i].fd);
      conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (polled[0].revents & POLLIN) {
      const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0 && PeerIsSameUser(c)) {
        conns.push_back(Connection{c, 0});
      } else if (c >= 0) {
        close(c);
      } else if (errno == EMFILE || errno == ENFILE) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
}

bool IpcExporter::Serve(Connection* conn) {
  IpcOpenRequest request;
  std::vector<int> stray;
  const bool received = ReceiveWithFds(conn->fd, &request, sizeof(request), &stray);
  CloseAll(stray);
  if (!received) return false;
  IpcOpenReply reply{CUDA_ERROR_INVALID_VALUE, 0};
  std::vector<int> fds;
  {
    MutexLock lock(&mu_);
    auto found = by_id_.find(request.export_id);
    if (found != by_id_.end() && found->second.token == request.token && !found->second.freed) {
      Record& record = found->second;
      ScopedContext scoped(driver_, record.core->context());
      reply.result = PinLocked(&record);
      if (reply.result == CUDA_SUCCESS) reply.result = ExportChunks(record, &fds);
      if (reply.result == CUDA_SUCCESS) {
        reply.chunks = static_cast<uint32_t>(fds.size());
        conn->export_id = request.export_id;  // the connection now holds an import
        ++record.opens;
        ++stats_.opens;
      } else if (record.opens == 0) {
        UnpinLocked(&record);
      }
    }
  }
  bool sent = SendWithFds(conn->fd, &reply, sizeof(reply), nullptr, 0);
  for (size_t i = 0; sent && i < fds.size(); i += kIpcFdsPerMessage) {
    const uint32_t count = static_cast<uint32_t>(std::min(kIpcFdsPerMessage, fds.size() - i));
    sent = SendWithFds(conn->fd, &count, sizeof(count), fds.data() + i, count);
  }
  CloseAll(fds);
  return sent && reply.result == CUDA_SUCCESS;
}

void IpcExporter::OnConnectionEnd(const Connection& conn) {
  if (conn.export_id == 0) return;
  MutexLock lock(&mu_);
  auto found = by_id_.find(conn.export_id);
  if (found == by_id_.end()) return;
  Record& record = found->second;
  ++stats_.closes;
  if (--record.opens > 0) return;
  ScopedContext scoped(driver_, record.core->context());
  UnpinLocked(&record);
  if (!record.freed) return;
  if (record.core->Free(record.ptr) != CUDA_SUCCESS) {
    MEMSHIM_LOG(kWarn, "deferred free of exported block %p failed",
                reinterpret_cast<void*>(record.ptr));
  }
  by_id_.erase(found);
  records_.fetch_sub(1, std::memory_order_relaxed);
  --stats_.exports;
}

}  // namespace memvirt::shim

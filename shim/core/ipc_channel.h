// The legacy-IPC handle of shim memory and the Unix socket that carries its
// physical chunks between processes (Note [shim ipc] in ipc_export.h).
//
// Thread safety: free functions without shared state.
#ifndef MEMVIRT_SHIM_CORE_IPC_CHANNEL_H_
#define MEMVIRT_SHIM_CORE_IPC_CHANNEL_H_

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memvirt::shim {

// The 64 bytes of a CUipcMemHandle for shim memory. `magic` tells it from a
// driver's handle (which the hooks forward); `pid` and `listener` name the
// exporter's abstract socket; `token` is a secret only handles carry.
struct ShimIpcHandle {
  char magic[8];
  uint32_t pid;
  uint32_t version;
  uint64_t listener;
  uint64_t export_id;
  uint64_t token;
  uint64_t offset;  // the block's start in its first chunk
  uint64_t bytes;   // the block's size
  uint64_t chunks;  // chunks it spans
};
static_assert(sizeof(ShimIpcHandle) == sizeof(CUipcMemHandle), "a handle is 64 bytes");

inline constexpr char kShimIpcMagic[8] = {'m', 'e', 'm', 'v', 'I', 'P', 'C', '\0'};
inline constexpr uint32_t kShimIpcVersion = 1;

void EncodeIpcHandle(const ShimIpcHandle& h, CUipcMemHandle* out);
// False if `in` is not a shim handle (a driver's handle).
bool DecodeIpcHandle(const CUipcMemHandle& in, ShimIpcHandle* out);

// The abstract socket name of an exporter's listener (without the leading NUL).
std::string IpcSocketName(uint32_t pid, uint64_t listener);

// Messages (SOCK_SEQPACKET): the importer sends one IpcOpenRequest; the
// exporter answers one IpcOpenReply, then, on success, the chunks' file
// descriptors in order, at most kIpcFdsPerMessage per message. The
// connection then stays open as long as the import: its end is the close.
struct IpcOpenRequest {
  uint64_t export_id;
  uint64_t token;
};
struct IpcOpenReply {
  int32_t result;  // CUresult
  uint32_t chunks;
};
inline constexpr size_t kIpcFdsPerMessage = 64;

// A listening SOCK_SEQPACKET socket bound to the abstract `name`; -1 on error.
int ListenIpc(const std::string& name);
// Connected to the abstract `name`; -1 on error (errno set).
int ConnectIpc(const std::string& name);
// True if the peer of connected socket `sock` runs as this process's user.
bool PeerIsSameUser(int sock);
// Sends `bytes` of `data` with `fds` attached (SCM_RIGHTS); false on error.
bool SendWithFds(int sock, const void* data, size_t bytes, const int* fds, size_t num_fds);
// Receives one message into `data` (exactly `bytes` expected) and appends
// the descriptors that came with it to `fds` (owned by the caller). False on
// error, end of stream or a message of another size.
bool ReceiveWithFds(int sock, void* data, size_t bytes, std::vector<int>* fds);

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_IPC_CHANNEL_H_

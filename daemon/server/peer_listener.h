// PeerListener: owns the daemon's Unix socket, accepts connections itself, records each
// connection's kernel credentials and hands the connected fd to the gRPC server.
//
// Note [peer credentials]
// gRPC C++ 1.51 does not put SO_PEERCRED into the AuthContext. So the daemon accepts
// connections itself, reads SO_PEERCRED/SO_PEERGROUPS on the accepted fd, and passes the fd
// to the server with grpc::AddInsecureChannelFromFd. gRPC names such a connection's peer
// "fd:<n>" (ServerContext::peer(); checked by tests/daemon/peer_identity_test.cc), so a handler
// maps its call back to the credentials recorded for fd <n>. A number is reused only after
// gRPC has closed the previous connection on it, and a call can only start while its
// connection is open, so a lookup at call start always finds the right connection. Nothing
// in a request body is ever used as identity.
//
// Thread safety: Start/Stop from one thread; Lookup is safe from any thread.
#ifndef MEMVIRT_DAEMON_SERVER_PEER_LISTENER_H_
#define MEMVIRT_DAEMON_SERVER_PEER_LISTENER_H_

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/types.h"

namespace grpc {
class Server;
}

namespace memvirt::daemon {

struct SocketOptions {
  std::string path;
  std::optional<gid_t> group;  // chown the socket to this group (mode 0660 either way)
};

class PeerListener {
 public:
  PeerListener() = default;
  ~PeerListener();
  PeerListener(const PeerListener&) = delete;
  PeerListener& operator=(const PeerListener&) = delete;

  // Creates the socket (replacing a stale one left by a killed daemon; FAILED_PRECONDITION if
  // another daemon is listening on it) without accepting yet.
  absl::Status Bind(const SocketOptions& options);
  // Starts accepting and feeding `server` (not owned; must outlive Stop()).
  void Start(grpc::Server* server);
  // Stops accepting, closes and removes the socket. Existing connections stay open.
  void Stop();

  // Credentials of the connection a call arrived on, from ServerContext::peer().
  // UNAUTHENTICATED if unknown.
  absl::StatusOr<PeerCredentials> Lookup(const std::string& grpc_peer) const;

 private:
  void AcceptLoop(grpc::Server* server);

  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that interrupts poll() in AcceptLoop
  std::thread thread_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, PeerCredentials> by_fd_ ABSL_GUARDED_BY(mu_);
};

// Creates a listening, non-blocking Unix socket at options.path, mode 0660 (group as given),
// replacing a stale socket left by a killed daemon; FAILED_PRECONDITION if a process is
// listening on it or the path is not a socket. Returns the fd (owned by the caller).
absl::StatusOr<int> ListenOnUnixSocket(const SocketOptions& options);

// Reads SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_PEER_LISTENER_H_

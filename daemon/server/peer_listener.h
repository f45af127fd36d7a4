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
// Note [gRPC connection limits]
// gRPC owns an accepted fd, so the listener cannot see it close. It records each fd's socket
// inode and, before accepting another connection, forgets every fd that no longer refers to
// that socket (fstat): what is left are the open connections. A connection beyond
// max_connections, or beyond max_connections_per_uid for one non-root uid, is closed at once
// (counted in refused()). Idle connections are closed by gRPC itself (GRPC_ARG_MAX_CONNECTION_
// IDLE_MS, set by the daemon); failures of accept4() are backed off (Note [accept backoff]).
//
// Thread safety: Start/Stop from one thread; Lookup and refused are safe from any thread.
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
#include "daemon/server/accept_backoff.h"

namespace grpc {
class Server;
}

namespace memvirt::daemon {

struct SocketOptions {
  std::string path;
  std::optional<gid_t> group;  // chown the socket to this group (mode 0660 either way)
};

struct ConnectionLimits {  // Note [gRPC connection limits]
  size_t max_connections = 1024;
  size_t max_connections_per_uid = 128;  // uid 0 is not limited
};

class PeerListener {
 public:
  PeerListener() = default;
  ~PeerListener();
  PeerListener(const PeerListener&) = delete;
  PeerListener& operator=(const PeerListener&) = delete;

  // Creates the socket (replacing a stale one left by a killed daemon; FAILED_PRECONDITION if
  // another daemon is listening on it) without accepting yet.
  absl::Status Bind(const SocketOptions& options, const ConnectionLimits& limits = {});
  // Starts accepting and feeding `server` (not owned; must outlive Stop()).
  void Start(grpc::Server* server);
  // Stops accepting, closes and removes the socket. Existing connections stay open.
  void Stop();

  // Credentials of the connection a call arrived on, from ServerContext::peer().
  // UNAUTHENTICATED if unknown.
  absl::StatusOr<PeerCredentials> Lookup(const std::string& grpc_peer) const;
  // Connections closed at accept by a limit.
  uint64_t refused() const;

 private:
  struct Connection {
    PeerCredentials peer;
    ino_t inode = 0;
  };
  void AcceptLoop(grpc::Server* server);
  // Accepts `fd` (handing it to `server`) or closes it by a limit.
  void AcceptOne(grpc::Server* server, int fd);
  // Forgets fds that gRPC has closed.
  void ForgetClosed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string path_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that interrupts poll() in AcceptLoop
  std::thread thread_;
  mutable absl::Mutex mu_;
  ConnectionLimits limits_;
  absl::flat_hash_map<int, Connection> by_fd_ ABSL_GUARDED_BY(mu_);
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  LogLimiter refusal_log_ ABSL_GUARDED_BY(mu_){absl::Seconds(10)};
};

// Creates a listening, non-blocking Unix socket at options.path, mode 0660 (group as given),
// replacing a stale socket left by a killed daemon; FAILED_PRECONDITION if a process is
// listening on it or the path is not a socket. Returns the fd (owned by the caller).
absl::StatusOr<int> ListenOnUnixSocket(const SocketOptions& options);

// Reads SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket.
absl::StatusOr<PeerCredentials> ReadPeerCredentials(int fd);

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_SERVER_PEER_LISTENER_H_

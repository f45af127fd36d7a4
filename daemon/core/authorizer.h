// Authorizer: who may do what, decided only from kernel-provided peer credentials.
//
// Rules (see docs/operations.md, "Security model"):
//   - An operator is uid 0 or a member (primary or supplementary group) of the configured
//     admin group. Only operators may set quotas, drain GPUs or see other users' processes.
//   - Any local user who can open the socket may register its own process and read the
//     status of processes running under its own uid.
//
// Thread safety: immutable after construction; safe for concurrent use.
#ifndef MEMVIRT_DAEMON_CORE_AUTHORIZER_H_
#define MEMVIRT_DAEMON_CORE_AUTHORIZER_H_

#include <optional>

#include "absl/status/status.h"
#include "daemon/core/types.h"

namespace memvirt::daemon {

class Authorizer {
 public:
  // `admin_gid`: the admin group, or nullopt for "root only".
  explicit Authorizer(std::optional<gid_t> admin_gid) : admin_gid_(admin_gid) {}

  bool IsOperator(const PeerCredentials& peer) const;
  // OK, or PERMISSION_DENIED naming the action.
  absl::Status RequireOperator(const PeerCredentials& peer, const char* action) const;
  // Whether `viewer` may see a process running with `subject` credentials.
  bool MaySee(const PeerCredentials& viewer, const PeerCredentials& subject) const;

 private:
  std::optional<gid_t> admin_gid_;
};

}  // namespace memvirt::daemon

#endif  // MEMVIRT_DAEMON_CORE_AUTHORIZER_H_

#include "daemon/core/authorizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace memvirt::daemon {

bool Authorizer::IsOperator(const PeerCredentials& peer) const {
  if (peer.uid == 0) return true;
  if (!admin_gid_.has_value()) return false;
  if (peer.gid == *admin_gid_) return true;
  return std::find(peer.groups.begin(), peer.groups.end(), *admin_gid_) != peer.groups.end();
}

absl::Status Authorizer::RequireOperator(const PeerCredentials& peer, const char* action) const {
  if (IsOperator(peer)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      action, " requires root or the admin group (caller uid ", peer.uid, ", gid ", peer.gid, ")"));
}

bool Authorizer::MaySee(const PeerCredentials& viewer, const PeerCredentials& subject) const {
  return IsOperator(viewer) || viewer.uid == subject.uid;
}

}  // namespace memvirt::daemon

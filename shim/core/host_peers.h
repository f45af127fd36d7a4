// HostPeers: the other cores of a process, which share its host budget
// (Note [host slots of other cores]).
//
// Note [host slots of other cores]
//   The cores of a process's devices draw host slots from one HostLedger (Note
//   [shared host budget] in host_ledger.h), and each core demotes only its own
//   host chunks to make room. So one core can find the ledger full while it
//   holds no host chunk itself, or none it can demote: another core holds
//   every slot. It then asks the other cores to give some back
//   (ReclaimHostFromPeers, ShimCore::GiveBackHostBytes: slots whose page-in
//   copies completed or whose chunks were freed, host chunks demoted to the
//   peer's spill tier, then idle host chunks moved into the peer's free device
//   memory) rather than fail with CUDA_ERROR_OUT_OF_MEMORY while room exists
//   elsewhere. Each peer takes its own lock for that, so the asking core must
//   hold none: the request is a deferred wait (Note [waits outside the lock]
//   in shim_core.h), made by the public call between the operation's attempts.
//   An operation that cannot defer its waits, or whose peers free nothing,
//   goes on without the slot, as with a full host tier. A peer moves only host
//   chunks it knows idle and waits only for its own copy stream and spill
//   tier, never for an application stream's enqueue window, so a call that
//   holds another core's window open (a cross-device copy, Note [cross-device
//   copies] in shim/hooks/cross_device.h) may ask too. No thread holds two
//   cores' locks.
//
// Note [frees of other cores]
//   What the cores commit beyond their device budgets is admitted against one
//   OverflowLedger (Note [shared admission] in overflow_ledger.h). A core
//   releases a freed block's share only once no work uses the block; until
//   then the free is pending and is settled at that core's next call. So an
//   allocation on one device could be refused for memory another device
//   freed long ago, if that device made no call since. A refused allocation
//   therefore asks the other cores, without its own lock, to settle the
//   frees whose work is known complete by now (ReleasePeerFrees,
//   ShimCore::ReleaseCompletedFrees: a poll of their events, no wait) and
//   tries once more.
//
// Thread safety: implementations are thread-safe.
#ifndef MEMVIRT_SHIM_CORE_HOST_PEERS_H_
#define MEMVIRT_SHIM_CORE_HOST_PEERS_H_

#include <cstdint>

namespace memvirt::shim {

class ShimCore;

class HostPeers {
 public:
  virtual ~HostPeers() = default;
  // Asks every core of the process but `asker` to give back up to `bytes` of
  // the shared host budget (ShimCore::GiveBackHostBytes); returns the bytes
  // they gave back.
  // REQUIRES: the calling thread holds no core's lock.
  virtual uint64_t ReclaimHostFromPeers(const ShimCore* asker, uint64_t bytes) = 0;
  // Asks every core but `asker` to settle its pending frees whose work is
  // complete (ShimCore::ReleaseCompletedFrees, Note [frees of other cores]);
  // true if any core released a block.
  // REQUIRES: the calling thread holds no core's lock.
  virtual bool ReleasePeerFrees(const ShimCore* asker) = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_HOST_PEERS_H_

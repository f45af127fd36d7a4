// TierChannel: the shim's SpillTier over the daemon's tier socket (Note [tier
// channel] in memvirt/tier_protocol.h): a shared staging memfd and a stream
// of store/load/discard requests answered in order.
//
// Requests may be pipelined: StartLoad() and Discard() only send; a reply is
// read when a later call needs it (replies of loads are kept per slot). If
// the daemon goes away (its socket closes) or a reply does not come within
// the request deadline, the channel is broken: the slabs stored through it
// are gone with the connection (the daemon discards them, or died with
// them), and loads of them fail (the core fails the access with a CUDA
// error; never other bytes). A daemon that is slow but still there is waited
// for up to the deadline (Note [slow or gone]). Note [reopening]: the next
// Store reopens a broken channel (the daemon closed an idle one, Note [tier
// connection limits] in daemon/server/tier_service.h, or it was restarted)
// with a new handshake and the same staging memfd; attempts that fail are
// spaced out (kReconnectBackoffMin doubling to kReconnectBackoffMax), and
// stores in between fail at once, so the data stays in host memory.
//
// Slab ids: the ids handed out are the channel's own (never reused), mapped
// to the daemon's ids of the current connection. A restarted daemon numbers
// its slabs anew, so an id of a lost slab could name another chunk's slab
// there; the mapping makes such an id unknown instead (its load fails).
//
// Thread safety: thread-safe; each call holds the channel's mutex for its
// whole length, reads of replies included (a WaitLoad() made without the
// core's mutex holds up the core's calls only while it reads replies, which
// come in order anyway). Lock order: the core's mutex before mu_; the channel
// calls out to nothing.
#ifndef MEMVIRT_SHIM_DAEMON_LINK_TIER_CHANNEL_H_
#define MEMVIRT_SHIM_DAEMON_LINK_TIER_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "memvirt/tier_protocol.h"
#include "shim/core/spill_tier.h"
#include "shim/core/thread_annotations.h"

namespace memvirt::shim {

struct TierChannelTimeouts {
  std::chrono::milliseconds connect{2000};   // the daemon's answer to the Hello
  std::chrono::milliseconds request{60000};  // a reply, while the socket stays open
};

class TierChannel final : public SpillTier {
 public:
  // Note [reopening].
  static constexpr std::chrono::milliseconds kReconnectBackoffMin{100};
  static constexpr std::chrono::milliseconds kReconnectBackoffMax{5000};

  // Connects to `socket_path`, creates and sends the staging memfd. Returns
  // null (with *error set to a static string) if the daemon refuses or is
  // not there.
  static std::unique_ptr<TierChannel> Connect(const std::string& socket_path,
                                              uint32_t staging_slots,
                                              const TierChannelTimeouts& timeouts,
                                              const char** error);
  ~TierChannel() override;
  TierChannel(const TierChannel&) = delete;
  TierChannel& operator=(const TierChannel&) = delete;

  uint32_t staging_slots() const override { return slots_; }
  void* staging(uint32_t slot) override;
  uint64_t capacity_bytes() const override MEMSHIM_EXCLUDES(mu_);
  SpillResult Store(uint32_t slot, uint64_t* id) override MEMSHIM_EXCLUDES(mu_);
  SpillResult StartLoad(uint64_t id, uint32_t slot) override MEMSHIM_EXCLUDES(mu_);
  SpillResult FinishLoad(uint32_t slot, bool wait) override MEMSHIM_EXCLUDES(mu_);
  void WaitLoad(uint32_t slot) override MEMSHIM_EXCLUDES(mu_);
  void Discard(uint64_t id) override MEMSHIM_EXCLUDES(mu_);

  uint64_t tenant() const MEMSHIM_EXCLUDES(mu_);
  // Slabs stored and not discarded, on the current connection.
  size_t live_slabs() const MEMSHIM_EXCLUDES(mu_);

 private:
  TierChannel(std::string socket_path, int memfd, uint8_t* staging, uint32_t slots,
              const TierChannelTimeouts& timeouts);
  // Connects and sends the Hello; null, or a static string saying why not.
  const char* Handshake() MEMSHIM_REQUIRES(mu_);
  // Reopens a broken channel (Note [reopening]); true if it is usable again.
  bool Reconnect() MEMSHIM_REQUIRES(mu_);
  bool Send(const tier::Request& r) MEMSHIM_REQUIRES(mu_);
  SpillResult StoreOnce(uint32_t slot, uint64_t* id) MEMSHIM_REQUIRES(mu_);
  // Reads the next reply (blocking up to the timeout if `wait`) and files it
  // under the request it answers. False if none was read.
  bool ReadOneReply(bool wait) MEMSHIM_REQUIRES(mu_);
  void Break() MEMSHIM_REQUIRES(mu_);

  struct Outstanding {
    tier::Op op;
    uint32_t slot;
  };
  mutable Mutex mu_;
  const std::string socket_path_;
  int fd_ MEMSHIM_GUARDED_BY(mu_) = -1;
  const int memfd_;  // kept to reopen the channel with the same staging area
  uint8_t* staging_;
  const uint32_t slots_;
  const TierChannelTimeouts timeouts_;
  // The channel's slab ids -> the daemon's, for slabs stored on this connection.
  std::unordered_map<uint64_t, uint64_t> slabs_ MEMSHIM_GUARDED_BY(mu_);
  uint64_t next_id_ MEMSHIM_GUARDED_BY(mu_) = 1;  // 0 is never an id
  std::chrono::steady_clock::time_point next_reconnect_ MEMSHIM_GUARDED_BY(mu_){};
  std::chrono::milliseconds reconnect_backoff_ MEMSHIM_GUARDED_BY(mu_){kReconnectBackoffMin};
  uint64_t capacity_ MEMSHIM_GUARDED_BY(mu_) = 0;
  uint64_t tenant_ MEMSHIM_GUARDED_BY(mu_) = 0;
  bool broken_ MEMSHIM_GUARDED_BY(mu_) = false;
  std::deque<Outstanding> outstanding_ MEMSHIM_GUARDED_BY(mu_);
  // Partial reply bytes read by a non-blocking poll.
  tier::Reply partial_ MEMSHIM_GUARDED_BY(mu_);
  size_t partial_bytes_ MEMSHIM_GUARDED_BY(mu_) = 0;
  // Per slot: load state. 0 none, 1 pending, 2 finished (result in load_result_).
  std::vector<uint8_t> load_state_ MEMSHIM_GUARDED_BY(mu_);
  std::vector<SpillResult> load_result_ MEMSHIM_GUARDED_BY(mu_);
  // The most recent store reply.
  bool store_done_ MEMSHIM_GUARDED_BY(mu_) = false;
  tier::Reply store_reply_ MEMSHIM_GUARDED_BY(mu_);
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_DAEMON_LINK_TIER_CHANNEL_H_

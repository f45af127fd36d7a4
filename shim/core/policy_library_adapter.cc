#include "shim/core/policy_library_adapter.h"

#include <span>
#include <vector>

#include "memvirt/policy/policy.h"
#include "shim/core/config.h"

namespace memvirt::shim {
namespace {

// Note [event protocol]
//   The library requires OnAlloc before any event naming a block and nothing
//   after OnFree. The core reports residency changes of freed chunks too
//   (they are reclaimed later), so the adapter filters events by liveness.
//
// Note [prefetch gate]
//   A policy/ policy only proposes non-resident live blocks for prefetch, so
//   while every live chunk is resident PrefetchCandidates() is certainly
//   empty. The adapter counts live chunks the policy sees as non-resident
//   (it forwards exactly the events that change that) and MayPrefetch()
//   answers from the count, which lets the launch fast path skip the
//   policy's planning walk whenever nothing is paged out.
//
// Note [deferred accesses]
//   OnAccess() only appends the step to a log; the library sees the logged
//   steps, in order, just before any other call reaches it (every event and
//   question flushes first) or when the log holds kMaxDeferredSteps steps
//   or kMaxDeferredAccesses chunk accesses.
//   The library therefore receives exactly the same sequence of calls as if
//   each access were forwarded at once, and answers every question with all
//   accesses known; only the time of delivery moves. The launch path then
//   pays for an append, and the library's per-step work runs in batches
//   instead of between driver calls that evict its state from the caches.
class PolicyLibraryAdapter : public ResidencyPolicy {
 public:
  PolicyLibraryAdapter(std::unique_ptr<policy::Policy> policy, std::string name,
                       uint32_t num_chunks)
      : policy_(std::move(policy)),
        name_(std::move(name)),
        live_(num_chunks, false),
        resident_(num_chunks, false) {}

  const char* name() const override { return name_.c_str(); }

  void OnAlloc(uint32_t chunk) override {
    FlushAccesses();
    // A repeated OnAlloc restarts the block as non-resident in the policy.
    if (!live_[chunk] || resident_[chunk]) ++non_resident_;
    live_[chunk] = true;
    resident_[chunk] = false;
    policy::BlockInfo info;
    info.bytes = kChunkBytes;
    policy_->OnAlloc(chunk, info);
  }
  void OnFree(uint32_t chunk) override {
    if (!live_[chunk]) return;
    FlushAccesses();
    live_[chunk] = false;
    if (!resident_[chunk]) --non_resident_;
    resident_[chunk] = false;
    policy_->OnFree(chunk);
  }
  void OnAccess(uint64_t step, const uint32_t* chunks, size_t count) override {
    for (size_t i = 0; i < count; ++i) {
      if (live_[chunks[i]]) accesses_.push_back({chunks[i], policy::AccessMode::kReadWrite});
    }
    steps_.push_back({step, accesses_.size()});
    if (steps_.size() >= kMaxDeferredSteps || accesses_.size() >= kMaxDeferredAccesses) {
      FlushAccesses();
    }
  }
  void OnResident(uint32_t chunk) override {
    if (!live_[chunk]) return;
    FlushAccesses();
    if (!resident_[chunk]) --non_resident_;
    resident_[chunk] = true;
    policy_->OnResident(chunk);
  }
  void OnEvicted(uint32_t chunk) override {
    if (!live_[chunk]) return;
    FlushAccesses();
    if (resident_[chunk]) ++non_resident_;
    resident_[chunk] = false;
    policy_->OnEvicted(chunk);
  }
  void OnBudgetChange(uint64_t device_bytes) override {
    FlushAccesses();
    policy_->OnBudgetChange(device_bytes);
  }

  bool PickVictim(Eligible eligible, void* context, uint32_t* victim) override {
    FlushAccesses();
    auto picked = policy_->PickVictim([&](policy::BlockId block) {
      return block < live_.size() && live_[block] &&
             eligible(context, static_cast<uint32_t>(block));
    });
    if (!picked) return false;
    *victim = static_cast<uint32_t>(*picked);
    return true;
  }

  std::vector<uint32_t> PrefetchCandidates(uint64_t byte_limit) override {
    std::vector<uint32_t> out;
    PrefetchCandidatesInto(byte_limit, &out);
    return out;
  }
  void PrefetchCandidatesInto(uint64_t byte_limit, std::vector<uint32_t>* out) override {
    out->clear();
    if (non_resident_ == 0) return;  // Note [prefetch gate]
    FlushAccesses();
    policy_->PrefetchCandidatesInto(byte_limit, requests_);
    for (const policy::PrefetchRequest& r : requests_) {
      if (r.block < live_.size() && live_[r.block]) out->push_back(static_cast<uint32_t>(r.block));
    }
  }
  bool MayPrefetch() const override { return non_resident_ > 0; }

 private:
  static constexpr size_t kMaxDeferredSteps = 64;
  static constexpr size_t kMaxDeferredAccesses = 1 << 16;  // bounds the log's memory
  struct DeferredStep {
    uint64_t step;
    size_t end;  // accesses_[previous end, end) are this step's
  };

  // Note [deferred accesses]
  void FlushAccesses() {
    if (steps_.empty()) return;
    size_t begin = 0;
    for (const DeferredStep& d : steps_) {
      policy_->OnAccess(
          d.step, std::span<const policy::BlockAccess>(accesses_.data() + begin, d.end - begin));
      begin = d.end;
    }
    steps_.clear();
    accesses_.clear();
  }

  std::unique_ptr<policy::Policy> policy_;
  std::string name_;
  // Bytes rather than bits: read on every access of the launch path.
  std::vector<uint8_t> live_;
  std::vector<uint8_t> resident_;              // as last reported to the policy (live chunks only)
  uint32_t non_resident_ = 0;                  // live chunks with resident_ false
  std::vector<policy::BlockAccess> accesses_;  // of the deferred steps, in order
  std::vector<DeferredStep> steps_;
  std::vector<policy::PrefetchRequest> requests_;  // reused across launches
};

}  // namespace

std::unique_ptr<ResidencyPolicy> MakePolicyLibraryAdapter(const std::string& which,
                                                          uint32_t num_chunks) {
  if (which == "lifetime") {
    return std::make_unique<PolicyLibraryAdapter>(policy::MakeLifetimePolicy(), "lifetime",
                                                  num_chunks);
  }
  return std::make_unique<PolicyLibraryAdapter>(policy::MakeLruPolicy(), "lru", num_chunks);
}

}  // namespace memvirt::shim

// ForwardingIoEngine: forwards every call to a target engine, so that a wrapper overrides only
// the calls it changes (the LevelDB EnvWrapper pattern).
//
// Ownership: the target is NOT owned and MUST outlive the wrapper.
// Thread safety: as the target's.
#ifndef MEMVIRT_NVME_FORWARDING_IO_ENGINE_H_
#define MEMVIRT_NVME_FORWARDING_IO_ENGINE_H_

#include "memvirt/nvme/io_engine.h"

namespace memvirt::nvme {

class ForwardingIoEngine : public IoEngine {
 public:
  explicit ForwardingIoEngine(IoEngine* target) : target_(target) {}

  absl::Status Submit(absl::Span<const IoRequest> requests) override {
    return target_->Submit(requests);
  }
  absl::StatusOr<size_t> Reap(absl::Span<IoCompletion> out, absl::Duration timeout) override {
    return target_->Reap(out, timeout);
  }
  size_t outstanding() const override { return target_->outstanding(); }
  int file_count() const override { return target_->file_count(); }
  uint64_t file_size(int file_index) const override { return target_->file_size(file_index); }
  bool direct_io() const override { return target_->direct_io(); }
  std::string description() const override { return target_->description(); }

  IoEngine* target() const { return target_; }

 private:
  IoEngine* const target_;
};

}  // namespace memvirt::nvme

#endif  // MEMVIRT_NVME_FORWARDING_IO_ENGINE_H_

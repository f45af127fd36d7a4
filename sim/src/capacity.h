// Device memory capacity accounting: how many physical bytes a simulated device has handed out.
//
// Thread safety: all implementations are thread-safe; NodeCapacity is also safe across
// processes sharing the same node name.
#ifndef MEMSIM_SRC_CAPACITY_H_
#define MEMSIM_SRC_CAPACITY_H_

#include <atomic>
#include <cstdint>

namespace memsim {

class CapacityAccount {
 public:
  virtual ~CapacityAccount() = default;
  // Charges `bytes`; false (and nothing charged) when used + bytes would exceed capacity().
  virtual bool TryCharge(uint64_t bytes) = 0;
  // Returns bytes previously charged by this process. REQUIRES: they were charged.
  virtual void Release(uint64_t bytes) = 0;
  // Bytes in use (by every process sharing the account).
  virtual uint64_t Used() = 0;
  virtual uint64_t capacity() const = 0;
};

// Capacity private to this process.
class LocalCapacity final : public CapacityAccount {
 public:
  explicit LocalCapacity(uint64_t capacity) : capacity_(capacity) {}
  bool TryCharge(uint64_t bytes) override;
  void Release(uint64_t bytes) override;
  uint64_t Used() override { return used_.load(std::memory_order_relaxed); }
  uint64_t capacity() const override { return capacity_; }

 private:
  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
};

}  // namespace memsim

#endif  // MEMSIM_SRC_CAPACITY_H_

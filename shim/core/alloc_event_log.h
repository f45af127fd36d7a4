// The allocation events a core reports to the control plane with its usage
// (UsageReport::alloc_events): bounded, and free of cost until someone reads
// them (a standalone process never polls usage, so it records nothing).
//
// Thread safety: not thread-safe; the owner serializes calls (ShimCore under
// its mutex).
#ifndef MEMVIRT_SHIM_CORE_ALLOC_EVENT_LOG_H_
#define MEMVIRT_SHIM_CORE_ALLOC_EVENT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "shim/core/control_plane.h"

namespace memvirt::shim {

class AllocEventLog {
 public:
  static constexpr size_t kMaxEvents = 16384;  // between two reports

  // Records an event once a report has been taken; beyond kMaxEvents
  // unreported events it counts the event as dropped instead.
  void Record(uint64_t alloc_id, uint64_t bytes, bool freed) {
    if (!polled_) return;  // standalone: nobody reads the log
    if (events_.size() >= kMaxEvents) {
      ++dropped_;
      return;
    }
    events_.push_back({alloc_id, bytes, freed});
  }
  // Moves the events since the previous report into `report` (with the
  // cumulative drop count) and starts recording.
  void TakeInto(UsageReport* report) {
    report->dropped_alloc_events = dropped_;
    report->alloc_events.swap(events_);
    events_.clear();
    polled_ = true;
  }

 private:
  bool polled_ = false;
  std::vector<AllocEvent> events_;
  uint64_t dropped_ = 0;
};

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_ALLOC_EVENT_LOG_H_

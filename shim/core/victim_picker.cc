#include "shim/core/victim_picker.h"

namespace memvirt::shim {

bool VictimPicker::Eligible(void* self, uint32_t chunk) {
  VictimPicker* picker = static_cast<VictimPicker*>(self);
  const ChunkEntry& e = (*picker->table_)[chunk];
  if (e.residence != Residence::kDevice || picker->touch_->Contains(e) || e.picked || e.evicting ||
      e.pinned) {
    return false;
  }
  if (!picker->idle_only_ || picker->uses_->Idle(chunk)) return true;
  // Note [eviction]: earlier work on the operation's own stream.
  return picker->stream_ != kNoIndex && picker->uses_->PendingOnlyOn(chunk, picker->stream_);
}

void VictimPicker::PickIdle(uint32_t want, uint32_t stream, std::vector<uint32_t>* victims) {
  idle_only_ = true;
  stream_ = stream;
  const size_t before = victims->size();
  uint32_t v;
  while (victims->size() - before < want && policy_->PickVictim(&Eligible, this, &v)) {
    victims->push_back(v);
    (*table_)[v].picked = true;
  }
  for (size_t i = before; i < victims->size(); ++i) (*table_)[(*victims)[i]].picked = false;
  stream_ = kNoIndex;
}

bool VictimPicker::PickInUse(uint32_t* victim) {
  idle_only_ = false;
  const bool found = policy_->PickVictim(&Eligible, this, victim);
  idle_only_ = true;
  return found;
}

}  // namespace memvirt::shim

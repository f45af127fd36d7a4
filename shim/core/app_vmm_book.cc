#include "shim/core/app_vmm_book.h"

namespace memvirt::shim {

CUmemGenericAllocationHandle AppVmmBook::AddHandle(uint64_t tag, uint32_t chunks,
                                                   const CUmemAllocationProp& prop) {
  const CUmemGenericAllocationHandle h = tag | (next_++ & ((1ull << 40) - 1));
  VirtualHandle& v = handles_[h];
  v.prop = prop;
  v.chunks = chunks;
  v.state.assign(chunks, 0);
  return h;
}

VirtualHandle* AppVmmBook::Find(CUmemGenericAllocationHandle handle) {
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : &it->second;
}

ChunkSpan AppVmmBook::ReservationAt(uint32_t first) const {
  auto it = reservations_.find(first);
  return it == reservations_.end() ? ChunkSpan{} : ChunkSpan{it->first, it->second};
}

ChunkSpan AppVmmBook::ReservationOf(uint32_t c) const {
  auto it = reservations_.upper_bound(c);
  if (it == reservations_.begin()) return {};
  --it;
  return c < it->first + it->second ? ChunkSpan{it->first, it->second} : ChunkSpan{};
}

const AppMapping* AppVmmBook::MappingAt(uint32_t first) const {
  auto it = mappings_.find(first);
  return it == mappings_.end() ? nullptr : &it->second;
}

const AppMapping* AppVmmBook::MappingOf(uint32_t c, uint32_t* first) const {
  auto it = mappings_.upper_bound(c);
  if (it == mappings_.begin()) return nullptr;
  --it;
  if (c >= it->first + it->second.count) return nullptr;
  *first = it->first;
  return &it->second;
}

AppMapping AppVmmBook::TakeMapping(uint32_t first) {
  auto it = mappings_.find(first);
  const AppMapping m = it->second;
  mappings_.erase(it);
  return m;
}

std::vector<std::pair<uint32_t, AppMapping>> AppVmmBook::MappingsOf(
    CUmemGenericAllocationHandle handle) const {
  std::vector<std::pair<uint32_t, AppMapping>> out;
  for (const auto& [first, m] : mappings_) {
    if (m.handle == handle) out.push_back({first, m});
  }
  return out;
}

}  // namespace memvirt::shim

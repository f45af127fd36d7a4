#include "link_charge.h"

#include <algorithm>

#include "address_space.h"
#include "device.h"

namespace memsim {

namespace {

// Bytes of [end.addr, + extent) in host memory: all of a plain host range, the host-located
// mappings of a device range.
uint64_t HostBackedBytes(const CopyEnd& end, size_t extent) {
  if (end.dev == nullptr) return extent;
  return end.dev->va().HostBackedBytes(end.addr, extent);
}

// The share of `bytes` moved that falls on `host` of `extent` bytes.
size_t ShareOf(uint64_t host, size_t extent, size_t bytes) {
  if (host >= extent) return bytes;
  if (host == 0) return 0;
  return static_cast<size_t>(static_cast<unsigned __int128>(bytes) * host / extent);
}

}  // namespace

CopyEngine::Clock::time_point LinkCharge::Book() const {
  auto done = CopyEngine::Clock::now();
  if (h2d != nullptr && h2d_bytes > 0) done = std::max(done, h2d->Book(h2d_bytes));
  if (d2h != nullptr && d2h_bytes > 0) done = std::max(done, d2h->Book(d2h_bytes));
  return done;
}

bool LinkCharge::throttled() const {
  return (h2d != nullptr && h2d_bytes > 0 && h2d->throttled()) ||
         (d2h != nullptr && d2h_bytes > 0 && d2h->throttled());
}

LinkCharge ChargeOfCopy(const CopyEnd& dst, size_t dst_extent, const CopyEnd& src,
                        size_t src_extent, size_t bytes) {
  LinkCharge charge;
  Device* link = dst.dev != nullptr ? dst.dev : src.dev;
  if (link == nullptr) return charge;  // two plain host pointers: the CPU copies
  if (link->h2d().throttled()) {
    charge.h2d = &link->h2d();
    charge.h2d_bytes = ShareOf(HostBackedBytes(src, src_extent), src_extent, bytes);
  }
  if (link->d2h().throttled()) {
    charge.d2h = &link->d2h();
    charge.d2h_bytes = ShareOf(HostBackedBytes(dst, dst_extent), dst_extent, bytes);
  }
  return charge;
}

LinkCharge ChargeOfMemset(Device& runner, const CopyEnd& dst, size_t extent, size_t bytes) {
  LinkCharge charge;
  if (!runner.d2h().throttled()) return charge;
  charge.d2h = &runner.d2h();
  charge.d2h_bytes = ShareOf(HostBackedBytes(dst, extent), extent, bytes);
  return charge;
}

}  // namespace memsim

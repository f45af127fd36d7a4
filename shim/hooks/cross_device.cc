#include "shim/hooks/cross_device.h"

#include "shim/driver/scoped_context.h"

namespace memvirt::shim::hooks {
namespace {

std::mutex& CrossDeviceMutex() {
  static std::mutex* mu = new std::mutex();  // leaked: hooks may run during exit
  return *mu;
}

}  // namespace

CUresult OtherDeviceSides::Prepare(const Runtime& runtime, const ShimCore* issuing,
                                   const MemRange* ranges, int count) {
  for (int i = 0; i < count; ++i) {
    if (ranges[i].bytes == 0) continue;
    ShimCore* owner = runtime.OwnerOf(ranges[i].ptr);
    if (owner == nullptr || owner == issuing) continue;
    bool seen = false;
    for (int k = 0; k < count_; ++k) seen |= sides_[k].core == owner;
    if (seen || count_ == kMaxSides) continue;  // a core takes all its ranges at once
    if (!serial_.owns_lock()) serial_ = std::unique_lock<std::mutex>(CrossDeviceMutex());
    Side& side = sides_[count_];
    CUresult r;
    {
      ScopedContext scoped(runtime.driver(), owner->context());
      // The owner ignores ranges outside its reservation.
      r = owner->BeforeAccess(ranges, count, /*stream=*/nullptr, /*per_thread=*/false,
                              /*synchronous=*/true, &side.ticket);
    }
    if (r != CUDA_SUCCESS) {
      (void)Finish(runtime, r, nullptr, false);
      return r;
    }
    side.core = owner;
    ++count_;
  }
  return CUDA_SUCCESS;
}

CUresult OtherDeviceSides::Finish(const Runtime& runtime, CUresult issued, CUstream stream,
                                  bool per_thread) {
  if (count_ == 0) {
    if (serial_.owns_lock()) serial_.unlock();
    return issued;
  }
  CUresult r = issued;
  const Driver* driver = runtime.driver();
  if (issued == CUDA_SUCCESS && driver->cuStreamSynchronize != nullptr) {
    CUstream wait = stream;
    if (wait == nullptr) wait = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    r = driver->cuStreamSynchronize(wait);
  }
  for (int k = 0; k < count_; ++k) sides_[k].ticket.Close();
  count_ = 0;
  serial_.unlock();
  return r;
}

}  // namespace memvirt::shim::hooks

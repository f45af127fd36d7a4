// Live-handle table: maps the opaque handle values the API hands out to owned objects.
//
// Every API entry point resolves its handles here, so a stale or foreign handle is rejected
// with an error code instead of being dereferenced, and the returned shared_ptr keeps the
// object alive for the duration of the call even if another thread destroys the handle.
//
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_REGISTRY_H_
#define MEMSIM_SRC_REGISTRY_H_

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace memsim {

template <typename T>
class HandleRegistry {
 public:
  void Add(const std::shared_ptr<T>& object) {
    std::lock_guard<std::mutex> lock(mu_);
    objects_[object.get()] = object;
  }

  // nullptr when `handle` is not live.
  std::shared_ptr<T> Get(const void* handle) const {
    if (handle == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    return it == objects_.end() ? nullptr : it->second;
  }

  // Removes and returns the object (nullptr when `handle` is not live).
  std::shared_ptr<T> Remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find(handle);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }

  std::vector<std::shared_ptr<T>> Snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    out.reserve(objects_.size());
    for (const auto& [key, object] : objects_) out.push_back(object);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<const void*, std::shared_ptr<T>> objects_;
};

}  // namespace memsim

#endif  // MEMSIM_SRC_REGISTRY_H_

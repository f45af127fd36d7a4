// Standard-library stand-in for absl::flat_hash_map in libmemshim.so's build
// of policy/ (shim/absl_compat/README.md).
#ifndef MEMVIRT_SHIM_ABSL_COMPAT_ABSL_CONTAINER_FLAT_HASH_MAP_H_
#define MEMVIRT_SHIM_ABSL_COMPAT_ABSL_CONTAINER_FLAT_HASH_MAP_H_

#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

namespace absl {

template <class K, class V, class Hash = std::hash<K>, class Eq = std::equal_to<K>,
          class Allocator = std::allocator<std::pair<const K, V>>>
using flat_hash_map = std::unordered_map<K, V, Hash, Eq, Allocator>;

}  // namespace absl

#endif  // MEMVIRT_SHIM_ABSL_COMPAT_ABSL_CONTAINER_FLAT_HASH_MAP_H_

// Stand-in for absl::FunctionRef in libmemshim.so's build of policy/
// (shim/absl_compat/README.md): a non-owning reference to a callable, valid
// while the callable lives (as Abseil's).
#ifndef MEMVIRT_SHIM_ABSL_COMPAT_ABSL_FUNCTIONAL_FUNCTION_REF_H_
#define MEMVIRT_SHIM_ABSL_COMPAT_ABSL_FUNCTIONAL_FUNCTION_REF_H_

#include <memory>
#include <type_traits>
#include <utility>

namespace absl {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, const F&, Args...>>>
  FunctionRef(const F& f)  // NOLINT(google-explicit-constructor): as Abseil's
      : object_(static_cast<const void*>(std::addressof(f))), call_(&Call<F>) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  template <typename F>
  static R Call(const void* object, Args... args) {
    return (*static_cast<const F*>(object))(std::forward<Args>(args)...);
  }

  const void* object_;
  R (*call_)(const void*, Args...);
};

}  // namespace absl

#endif  // MEMVIRT_SHIM_ABSL_COMPAT_ABSL_FUNCTIONAL_FUNCTION_REF_H_

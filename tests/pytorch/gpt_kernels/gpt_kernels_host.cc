// Host implementations of gpt_kernels.cu's kernels for the simulated driver (loaded through
// MEMSIM_KERNELS): `extern "C" void NAME_kernel(void** params)`, params[i] pointing at argument
// i, running every item of the launch in order (sim/include/memsim/kernel.h).
#include <cstddef>
#include <tuple>
#include <utility>

#include "gpt_ops.h"

namespace {

// Calls item(i, args...) for i in [0, n), the arguments read from the launch's parameters
// (params[0] is n).
template <typename... Args, size_t... I>
void RunItems(void** params, void (*item)(long, Args...), std::index_sequence<I...>) {
  const long n = *static_cast<long*>(params[0]);
  const std::tuple<Args...> args{*static_cast<std::remove_reference_t<Args>*>(params[I + 1])...};
  for (long i = 0; i < n; ++i) item(i, std::get<I>(args)...);
}

template <typename... Args>
void RunItems(void** params, void (*item)(long, Args...)) {
  RunItems(params, item, std::index_sequence_for<Args...>{});
}

}  // namespace

#define GPT_OP(name, decl, args)                                                         \
  extern "C" __attribute__((visibility("default"))) void name##_kernel(void** params) { \
    RunItems(params, &name##_item);                                                      \
  }
#include "gpt_op_list.h"

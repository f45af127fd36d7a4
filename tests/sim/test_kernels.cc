// Kernels for the simulated-GPU tests: host functions in a shared object, loaded with
// cuModuleLoad. Each body runs once per launch and loops over its elements itself.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "memsim/kernel.h"
#include "mixed_args.h"

template <typename T>
static T Arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

// out[i] = value for i < n.
MEMSIM_KERNEL(fill_u32, sizeof(uint32_t*), sizeof(uint32_t), sizeof(uint64_t)) {
  auto* out = Arg<uint32_t*>(params, 0);
  const uint32_t value = Arg<uint32_t>(params, 1);
  const uint64_t n = Arg<uint64_t>(params, 2);
  for (uint64_t i = 0; i < n; ++i) out[i] = value;
}

// y[i] = a * x[i] + y[i] for i < n.
MEMSIM_KERNEL(saxpy, sizeof(float), sizeof(float*), sizeof(float*), sizeof(int)) {
  const float a = Arg<float>(params, 0);
  const float* x = Arg<float*>(params, 1);
  float* y = Arg<float*>(params, 2);
  const int n = Arg<int>(params, 3);
  for (int i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

// out[counter++] = tag: records the order in which launches ran.
MEMSIM_KERNEL(record_order, sizeof(uint32_t*), sizeof(uint32_t*), sizeof(uint32_t)) {
  auto* counter = Arg<uint32_t*>(params, 0);
  auto* out = Arg<uint32_t*>(params, 1);
  const uint32_t tag = Arg<uint32_t>(params, 2);
  const uint32_t slot = __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
  out[slot] = tag;
}

// Spins until *flag != 0 (the test releases it), then sets *flag to 2.
MEMSIM_KERNEL(wait_flag, sizeof(int*)) {
  int* flag = Arg<int*>(params, 0);
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  __atomic_store_n(flag, 2, __ATOMIC_RELEASE);
}

// *dst = value (used to touch memory that may not be accessible).
MEMSIM_KERNEL(write_u32, sizeof(uint32_t*), sizeof(uint32_t)) {
  volatile uint32_t* dst = Arg<uint32_t*>(params, 0);
  *dst = Arg<uint32_t>(params, 1);
}

// *dst = *src.
MEMSIM_KERNEL(copy_u32, sizeof(uint32_t*), sizeof(uint32_t*)) {
  volatile uint32_t* src = Arg<uint32_t*>(params, 0);
  uint32_t* dst = Arg<uint32_t*>(params, 1);
  *dst = *src;
}

// out[0..5] = grid.xyz, block.xyz; out[6] = shared_mem_bytes; out[7] = shared_mem != NULL.
MEMSIM_KERNEL(geometry, sizeof(uint32_t*)) {
  auto* out = Arg<uint32_t*>(params, 0);
  const memsim_launch* l = memsim_current_launch();
  out[0] = l->grid.x;
  out[1] = l->grid.y;
  out[2] = l->grid.z;
  out[3] = l->block.x;
  out[4] = l->block.y;
  out[5] = l->block.z;
  out[6] = l->shared_mem_bytes;
  out[7] = l->shared_mem != nullptr ? 1 : 0;
  if (l->shared_mem != nullptr) std::memset(l->shared_mem, 0xab, l->shared_mem_bytes);
}

// Mixed scalar layout: writes its arguments back so the test can check packing.
using memsim_test::Mixed;
MEMSIM_KERNEL(mixed_args, sizeof(char), sizeof(double), sizeof(int), sizeof(short),
              sizeof(Mixed*)) {
  Mixed* out = Arg<Mixed*>(params, 4);
  out->c = Arg<char>(params, 0);
  out->d = Arg<double>(params, 1);
  out->i = Arg<int>(params, 2);
  out->s = Arg<short>(params, 3);
  out->sum =
      static_cast<uint64_t>(out->c) + static_cast<uint64_t>(out->i) + static_cast<uint64_t>(out->s);
}

// *out = sum of in[0..n) (a checksum computed on the device side).
MEMSIM_KERNEL(sum_u32, sizeof(uint32_t*), sizeof(uint64_t), sizeof(uint64_t*)) {
  const uint32_t* in = Arg<uint32_t*>(params, 0);
  const uint64_t n = Arg<uint64_t>(params, 1);
  uint64_t* out = Arg<uint64_t*>(params, 2);
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += in[i];
  *out = s;
}

MEMSIM_KERNEL0(no_args) {
  (void)params;
  static std::atomic<int> calls{0};
  calls.fetch_add(1);
}

// A symbol without a layout: cuModuleGetFunction must refuse it.
extern "C" __attribute__((visibility("default"))) void missing_layout(void** params) {
  (void)params;
}

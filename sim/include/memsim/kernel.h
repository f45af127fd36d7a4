/* memsim kernel authoring interface (C and C++).
 *
 * A simulated-GPU kernel is a host function in a shared object loaded with cuModuleLoad():
 *
 *   extern "C" void NAME(void** params);                 // params[i] points at argument i
 *   extern "C" const unsigned NAME__param_sizes[];       // byte sizes, 0-terminated
 *
 * or the host implementation of a kernel of an nvcc image (fatbin or cubin): the same function,
 * named by the kernel's mangled name, without NAME__param_sizes (the layout comes from the
 * cubin), in a shared object listed in MEMSIM_KERNELS or in the process (docs/sim.md,
 * "Kernels from nvcc images").
 *
 * The body runs ONCE per launch on the stream's worker thread (not once per GPU thread): it
 * loops over the grid itself, using memsim_current_launch() for the launch geometry.
 * Parameter offsets of shared-object kernels follow natural alignment, min(size, 8) (what
 * cuFuncGetParamInfo reports); those of image kernels are the cubin's.
 *
 * Thread safety: memsim_current_launch() is per thread; it is non-NULL only while a kernel body
 * runs on the calling thread, and the pointee stays valid until the body returns.
 */
#ifndef MEMSIM_KERNEL_H_
#define MEMSIM_KERNEL_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memsim_dim3 {
  unsigned int x;
  unsigned int y;
  unsigned int z;
} memsim_dim3;

typedef struct memsim_launch {
  memsim_dim3 grid;              /* gridDim of the launch */
  memsim_dim3 block;             /* blockDim of the launch */
  unsigned int shared_mem_bytes; /* dynamic shared memory requested */
  void* shared_mem;              /* scratch buffer of shared_mem_bytes (NULL if 0) */
} memsim_launch;

/* The launch being executed by the calling thread, or NULL outside a kernel body. */
const memsim_launch* memsim_current_launch(void);

#ifdef __cplusplus
}
#define MEMSIM_EXTERN_C extern "C"
#else
#define MEMSIM_EXTERN_C
#endif

/* Total threads of the current launch along x (grid.x * block.x); 0 outside a kernel. */
static inline unsigned long long memsim_total_threads_x(void) {
  const memsim_launch* l = memsim_current_launch();
  return l ? (unsigned long long)l->grid.x * l->block.x : 0ULL;
}

/* Declares a kernel and its parameter layout in one place:
 *
 *   MEMSIM_KERNEL(saxpy, sizeof(float), sizeof(float*), sizeof(float*), sizeof(int)) {
 *     float a = *(float*)params[0]; ...
 *   }
 *
 * Kernels without parameters use MEMSIM_KERNEL0(name) instead.
 */
#define MEMSIM_KERNEL(name, ...)                           \
  MEMSIM_EXTERN_C __attribute__((visibility("default")))   \
  const unsigned name##__param_sizes[] = {__VA_ARGS__, 0}; \
  MEMSIM_EXTERN_C __attribute__((visibility("default"))) void name(void** params)

#define MEMSIM_KERNEL0(name)                             \
  MEMSIM_EXTERN_C __attribute__((visibility("default"))) \
  const unsigned name##__param_sizes[] = {0};            \
  MEMSIM_EXTERN_C __attribute__((visibility("default"))) void name(void** params)

#endif /* MEMSIM_KERNEL_H_ */

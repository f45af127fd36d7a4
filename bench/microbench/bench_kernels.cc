// No-op kernels for memvirt-bench, in the simulated GPU's ABI.
#include "memsim/kernel.h"

#define P sizeof(void*)
#define P8 P, P, P, P, P, P, P, P

MEMSIM_KERNEL(noop8, P8) { (void)params; }
MEMSIM_KERNEL(noop64, P8, P8, P8, P8, P8, P8, P8, P8) { (void)params; }

// Which flavour of a driver entry point a lookup by name and version means.
//
// Note [entry-point flavours]
//   An entry point has one flavour per ABI change (cuMemAlloc: 32-bit
//   pointers since CUDA 2.0, cuMemAlloc_v2 with 64-bit ones since 3.2) and a
//   per-thread default-stream flavour for calls with a stream or a
//   synchronous copy (_ptsz/_ptds, since 7.0). cuGetProcAddress(name,
//   version, flags) answers with the flavour of the highest CUDA version not
//   above `version`; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM the
//   per-thread one if the name has one at that version, else the plain one.
//   The table (shim/driver/cuda_entry_points.inc) is generated from the
//   toolkit's cudaTypedefs.h by sim/tools/gen_proc_address_table.py, the
//   same rows the simulated driver answers with; its PFN typedefs are the
//   ABIs (tests/shim/entry_points.cc checks each hooked flavour against its
//   typedef at compile time).
//
// Thread safety: pure functions over a constant table.
#ifndef MEMVIRT_SHIM_HOOKS_ENTRY_POINT_TABLE_H_
#define MEMVIRT_SHIM_HOOKS_ENTRY_POINT_TABLE_H_

namespace memvirt::shim::hooks {

struct EntryPointFlavour {
  const char* base;    // the name cuGetProcAddress is asked for
  int version;         // the CUDA version that introduced this flavour
  const char* symbol;  // the flavour's exported name (cuMemAlloc_v2, cuLaunchKernel_ptsz, ...)
  bool per_thread;
};

// The flavour of `base` a lookup at CUDA version `version` answers with, or
// null if the table lists no flavour of `base` at or below `version`.
const EntryPointFlavour* FlavourFor(const char* base, int version, bool per_thread);

// Every flavour of `base` in table order (plain by version, then per-thread):
// sets *count and returns the first, or null with *count = 0.
const EntryPointFlavour* FlavoursOf(const char* base, int* count);

}  // namespace memvirt::shim::hooks

#endif  // MEMVIRT_SHIM_HOOKS_ENTRY_POINT_TABLE_H_

// The private interface tables that NVIDIA's runtime (libcudart) obtains with cuGetExportTable.
//
// Note [export tables]: libcudart 13 does not start without a few undocumented tables, each
// named by a 16-byte id: CUDART_INTERFACE (the primary context of a device), the tools
// callback-hooks and TLS tables (scratch buffers; must exist), CONTEXT_LOCAL_STORAGE (a
// per-context key/value store with destructors run when the context is destroyed or reset),
// CONTEXT_CHECKS and INTEGRITY_CHECK (Note [integrity check] in integrity_check.h). Their
// layouts drift between CUDA releases, so all of them live in api_export_table.cc, each with the
// version it was checked against (CUDA 13.0, libcudart 13.0.88); tests/cuda runs the toolkit's
// libcudart on them. Slots the runtime was never seen to call answer CUDA_ERROR_NOT_SUPPORTED.
// Unknown ids: CUDA_ERROR_INVALID_VALUE and a NULL table.
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_EXPORT_TABLES_H_
#define MEMSIM_SRC_EXPORT_TABLES_H_

namespace memsim {

class Context;

// Runs and forgets the context-local storage destructors registered for `ctx`.
// REQUIRES: no driver lock is held (the destructors may call the driver).
void DestroyContextLocalStorage(Context* ctx);

}  // namespace memsim

#endif  // MEMSIM_SRC_EXPORT_TABLES_H_

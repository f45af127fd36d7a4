// Turns what the module and library load entry points receive into a Module (Note [module
// images] in api_module.cc): an nvcc image in memory (wrapper, fatbin container, bare cubin), a
// file holding a fatbin or cubin, or the path of a shared object.
//
// Note [images without a size]: cuModuleLoadData and cuLibraryLoadData get a bare pointer. The
// image's extent is computed from its headers and the image is copied before it is parsed; every
// read of caller memory runs under the fault guard (fault_guard.h), so a header that points
// outside readable memory gives CUDA_ERROR_INVALID_IMAGE instead of a crash. Headers that stay
// within readable memory but describe bytes beyond the caller's buffer cannot be told apart from
// a valid image. Only the first fatbin container of an in-memory image is used (FatbinExtent in
// fatbin.h); the file forms (cuModuleLoad, cuLibraryLoadFromFile) know the exact size.
//
// REQUIRES: cuInit succeeded (the fault handler is installed).
// Thread safety: thread-safe.
#ifndef MEMSIM_SRC_MODULE_LOADER_H_
#define MEMSIM_SRC_MODULE_LOADER_H_

#include <cstddef>
#include <memory>

#include "cuda_api.h"
#include "module.h"

namespace memsim {

// `image`: an nvcc image, or else a NUL-terminated path (LoadModuleFromFile).
CUresult LoadModuleFromImage(const void* image, std::shared_ptr<Module>* out);

// A file holding a fatbin container or cubin, or else a shared object (dlopen).
// CUDA_ERROR_FILE_NOT_FOUND when it cannot be opened.
CUresult LoadModuleFromFile(const char* path, std::shared_ptr<Module>* out);

// Fatbin container(s) or a cubin of known size. CUDA_ERROR_INVALID_IMAGE when malformed,
// CUDA_ERROR_NO_BINARY_FOR_GPU without an sm_90 cubin (Note [arch choice] in fatbin.h).
// `image_object`: the loaded object the caller's image lies in (Note [launch stubs]), if any.
CUresult LoadModuleFromBytes(const unsigned char* data, size_t size, std::shared_ptr<Module>* out,
                             const void* image_object = nullptr);

}  // namespace memsim

#endif  // MEMSIM_SRC_MODULE_LOADER_H_

// nvcc's fatbin images: the wrapper cudart registers, fatbin containers and their entries, and the
// choice of the cubin the sim uses.
//
// Note [fatbin layout] (checked against nvcc 13.0 output):
// - Wrapper (`__fatBinC_Wrapper_t`): u32 magic 0x466243B1, u32 version, then at offset 8 a
//   pointer to the fatbin data (a container).
// - Container: u32 magic 0xBA55ED50, u16 version, u16 header size (16), u64 payload size; the
//   entries lie back to back in the payload; several containers may follow each other.
// - Entry: u16 kind (1 = PTX, 2 = ELF cubin), u32 header size at 4, u32 payload size at 8
//   (padded), u32 compressed size at 0x10, u32 architecture at 0x1c (90 for sm_90), u64 flags at
//   0x28 (0x8000 = zstd frame, 0x2000 = raw LZ4 block), u64 uncompressed size at 0x38.
//
// Note [arch choice]: the sim reports compute capability 9.0. A cubin for sm_XY runs only on a
// device of major X and minor >= Y, so the sim takes the first cubin whose architecture is 90
// (sm_90 or sm_90a). An image with no such cubin (other architectures only, or PTX only: the sim
// has no JIT compiler) gives CUDA_ERROR_NO_BINARY_FOR_GPU ("no kernel image available that is
// suitable for the device"). A bare cubin must be for sm_90 as well.
//
// Thread safety: pure functions.
#ifndef MEMSIM_SRC_FATBIN_H_
#define MEMSIM_SRC_FATBIN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cubin.h"
#include "cuda_api.h"

namespace memsim {

inline constexpr uint32_t kFatbinWrapperMagic = 0x466243B1;
inline constexpr uint32_t kFatbinContainerMagic = 0xBA55ED50;
inline constexpr unsigned kSimCubinArch = 90;

enum class ImageFormat { kUnknown, kFatbinWrapper, kFatbinContainer, kCubin };

// Recognises an image by its first bytes. Reads byte by byte and stops at the first mismatch, so
// it never reads past the terminator of a NUL-terminated string (the legacy path form).
ImageFormat DetectImageFormat(const void* image);

// Bytes spanned by the container at offset 0 of an image, from its header read through `read`
// (images given by pointer carry no size). Only the first container is measured: nothing tells
// whether bytes after it belong to the image (each wrapper nvcc emits points at one container),
// so reading on could run past the caller's buffer. 0 when the header is implausible.
uint64_t FatbinExtent(ImageReader read, void* ctx);

// The cubin for the sim's architecture (Note [arch choice]) from container(s) or a bare cubin
// held in [data, data + size), decompressed. CUDA_ERROR_INVALID_IMAGE when malformed,
// CUDA_ERROR_NO_BINARY_FOR_GPU when no suitable cubin is present.
CUresult SelectCubin(const unsigned char* data, size_t size, std::vector<unsigned char>* cubin);

}  // namespace memsim

#endif  // MEMSIM_SRC_FATBIN_H_

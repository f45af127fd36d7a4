// Parser for CUDA cubins (ELF64 images produced by ptxas / nvcc -cubin): the kernels with their
// parameter layouts and the `__device__` / `__constant__` variables with their initial bytes.
//
// Note [cubin layout]: a kernel NAME has a section `.nv.info.NAME` of attribute records
// {u8 format, u8 attribute, then a u16 value (formats 1-3) or a u16 length and that many bytes
// (format 4)}. EIATTR_KPARAM_INFO (0x17) describes one parameter: {u32 index, u16 ordinal,
// u16 offset, u32 flags}, size = flags >> 18; this is the only source of offsets (parameters
// with __align__(16) break the natural-alignment rule). nvcc 13 gives the total parameter size
// as EIATTR_CBANK_PARAM_SIZE (0x19, u16 value) and also as the size half of EIATTR_PARAM_CBANK
// (0xa, {u32 symbol, u16 offset, u16 size}); the first one present wins, and without either
// the total is the end of the last parameter. Variables are STT_OBJECT symbols defined in
// `.nv.global*` or `.nv.constant*` sections; their bytes come from the section (zeros when it is
// SHT_NOBITS).
//
// Every offset read from the image is bounds-checked: a malformed image gives
// CUDA_ERROR_INVALID_IMAGE and never reads outside [data, data + size).
// Thread safety: pure functions.
#ifndef MEMSIM_SRC_CUBIN_H_
#define MEMSIM_SRC_CUBIN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_api.h"

namespace memsim {

inline constexpr uint16_t kElfMachineCuda = 190;  // EM_CUDA

struct CubinParam {
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct CubinKernel {
  std::string name;                // mangled name
  std::vector<CubinParam> params;  // by ordinal
  uint32_t param_bytes = 0;        // total size of the parameter buffer
};

struct CubinVariable {
  std::string name;
  uint64_t size = 0;
  std::vector<unsigned char> init;  // `size` bytes (zeros for NOBITS sections)
};

struct Cubin {
  unsigned sm = 0;  // architecture from e_flags, e.g. 90
  std::vector<CubinKernel> kernels;
  std::vector<CubinVariable> variables;
};

// True when the bytes start like an ELF64 little-endian CUDA image (size >= 64).
bool LooksLikeCubin(const unsigned char* data, size_t size);

// Parses a cubin held in [data, data + size). CUDA_ERROR_INVALID_IMAGE when malformed.
CUresult ParseCubin(const unsigned char* data, size_t size, Cubin* out);

// Bytes an ELF64 image spans according to its headers (ELF header, section and program header
// tables, section contents). `read(offset, dst, n)` copies image bytes and returns false when
// they cannot be read. 0 when the headers are not a plausible ELF64 image.
using ImageReader = bool (*)(void* ctx, uint64_t offset, void* dst, size_t n);
uint64_t ElfExtent(ImageReader read, void* ctx);

}  // namespace memsim

#endif  // MEMSIM_SRC_CUBIN_H_

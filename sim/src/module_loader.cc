#include "module_loader.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "cubin.h"
#include "fatbin.h"
#include "fault_guard.h"
#include "host_kernels.h"

namespace memsim {

namespace {

constexpr size_t kMaxFileBytes = size_t{1} << 30;

// Copies caller memory under the fault guard (Note [images without a size]).
bool GuardedCopy(const unsigned char* src, void* dst, size_t n) {
  auto copy = [&] { std::memcpy(dst, src, n); };
  return RunGuardedCall(copy);
}

bool ReadCallerMemory(void* base, uint64_t offset, void* dst, size_t n) {
  return GuardedCopy(static_cast<const unsigned char*>(base) + offset, dst, n);
}

CUresult CopyImage(const unsigned char* start, uint64_t extent, std::shared_ptr<Module>* out) {
  if (extent == 0) return CUDA_ERROR_INVALID_IMAGE;
  std::vector<unsigned char> bytes(extent);
  if (!GuardedCopy(start, bytes.data(), bytes.size())) return CUDA_ERROR_INVALID_IMAGE;
  return LoadModuleFromBytes(bytes.data(), bytes.size(), out, ObjectContaining(start));
}

bool IsImageFile(const unsigned char* head, size_t n) {
  uint32_t magic = 0;
  if (n >= 4) std::memcpy(&magic, head, 4);
  return magic == kFatbinContainerMagic || LooksLikeCubin(head, n);
}

}  // namespace

CUresult LoadModuleFromBytes(const unsigned char* data, size_t size, std::shared_ptr<Module>* out,
                             const void* image_object) {
  std::vector<unsigned char> bytes;
  if (CUresult r = SelectCubin(data, size, &bytes)) return r;
  Cubin cubin;
  if (CUresult r = ParseCubin(bytes.data(), bytes.size(), &cubin)) return r;
  if (cubin.sm != kSimCubinArch) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *out = Module::FromCubin(std::move(cubin), image_object);
  return CUDA_SUCCESS;
}

CUresult LoadModuleFromImage(const void* image, std::shared_ptr<Module>* out) {
  if (image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* base = static_cast<unsigned char*>(const_cast<void*>(image));
  switch (DetectImageFormat(image)) {
    case ImageFormat::kFatbinWrapper: {
      unsigned char* fatbin = nullptr;
      if (!GuardedCopy(base + 8, &fatbin, sizeof(fatbin)) || fatbin == nullptr) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
      return CopyImage(fatbin, FatbinExtent(ReadCallerMemory, fatbin), out);
    }
    case ImageFormat::kFatbinContainer:
      return CopyImage(base, FatbinExtent(ReadCallerMemory, base), out);
    case ImageFormat::kCubin:
      return CopyImage(base, ElfExtent(ReadCallerMemory, base), out);
    case ImageFormat::kUnknown:
      break;
  }
  return LoadModuleFromFile(static_cast<const char*>(image), out);
}

CUresult LoadModuleFromFile(const char* path, std::shared_ptr<Module>* out) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (file) {
    unsigned char head[64] = {};
    file.read(reinterpret_cast<char*>(head), sizeof(head));
    if (IsImageFile(head, static_cast<size_t>(file.gcount()))) {
      file.clear();
      file.seekg(0, std::ios::end);
      const auto size = static_cast<size_t>(file.tellg());
      if (size > kMaxFileBytes) return CUDA_ERROR_INVALID_IMAGE;
      std::vector<unsigned char> bytes(size);
      file.seekg(0);
      if (!file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size))) {
        return CUDA_ERROR_FILE_NOT_FOUND;
      }
      return LoadModuleFromBytes(bytes.data(), bytes.size(), out);
    }
  }
  CUresult error;
  auto module = Module::Load(path, &error);
  if (!module) return error;
  *out = std::move(module);
  return CUDA_SUCCESS;
}

}  // namespace memsim

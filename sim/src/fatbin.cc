#include "fatbin.h"

#include <lz4.h>
#include <zstd.h>

#include <cstring>

#include "image_bytes.h"

namespace memsim {

namespace {

constexpr uint64_t kContainerHeaderBytes = 16;
constexpr uint64_t kEntryHeaderBytes = 0x40;
constexpr uint16_t kEntryCubin = 2;
constexpr uint64_t kFlagZstd = 0x8000;
constexpr uint64_t kFlagLz4 = 0x2000;

bool MatchesMagic(const unsigned char* p, const unsigned char* magic, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != magic[i]) return false;
  }
  return true;
}

struct Entry {
  const unsigned char* payload = nullptr;
  uint64_t payload_bytes = 0;
  uint64_t compressed_bytes = 0;
  uint64_t uncompressed_bytes = 0;
  uint64_t flags = 0;
};

CUresult Decompress(const Entry& e, std::vector<unsigned char>* out) {
  const bool zstd = (e.flags & kFlagZstd) != 0;
  const bool lz4 = (e.flags & kFlagLz4) != 0;
  if (!zstd && !lz4) {
    out->assign(e.payload, e.payload + e.payload_bytes);
    return CUDA_SUCCESS;
  }
  if ((zstd && lz4) || e.compressed_bytes == 0 || e.compressed_bytes > e.payload_bytes ||
      e.uncompressed_bytes == 0 || e.uncompressed_bytes > kMaxImageBytes) {
    return CUDA_ERROR_INVALID_IMAGE;
  }
  out->resize(e.uncompressed_bytes);
  if (zstd) {
    const size_t n = ZSTD_decompress(out->data(), out->size(), e.payload, e.compressed_bytes);
    if (ZSTD_isError(n) || n != out->size()) return CUDA_ERROR_INVALID_IMAGE;
  } else {
    if (e.compressed_bytes > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE)) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const int n = LZ4_decompress_safe(
        reinterpret_cast<const char*>(e.payload), reinterpret_cast<char*>(out->data()),
        static_cast<int>(e.compressed_bytes), static_cast<int>(out->size()));
    if (n < 0 || static_cast<uint64_t>(n) != out->size()) return CUDA_ERROR_INVALID_IMAGE;
  }
  return CUDA_SUCCESS;
}

// Finds the entry to use among all containers in [data, data + size).
CUresult FindCubinEntry(const unsigned char* data, size_t size, Entry* chosen) {
  bool found = false;
  uint64_t pos = 0;
  while (pos < size) {
    if (!InBounds(pos, kContainerHeaderBytes, size) ||
        LoadField<uint32_t>(data + pos) != kFatbinContainerMagic) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const uint64_t header = LoadField<uint16_t>(data + pos + 6);
    const uint64_t payload = LoadField<uint64_t>(data + pos + 8);
    if (header < kContainerHeaderBytes || !InBounds(pos, header, size) ||
        !InBounds(pos + header, payload, size)) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const unsigned char* entries = data + pos + header;
    uint64_t e = 0;
    while (e < payload) {
      if (!InBounds(e, kEntryHeaderBytes, payload)) return CUDA_ERROR_INVALID_IMAGE;
      const unsigned char* h = entries + e;
      const uint64_t entry_header = LoadField<uint32_t>(h + 4);
      const uint64_t entry_payload = LoadField<uint32_t>(h + 8);
      if (entry_header < kEntryHeaderBytes || !InBounds(e, entry_header, payload) ||
          !InBounds(e + entry_header, entry_payload, payload)) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
      if (!found && LoadField<uint16_t>(h) == kEntryCubin &&
          LoadField<uint32_t>(h + 0x1c) == kSimCubinArch) {
        found = true;
        chosen->payload = h + entry_header;
        chosen->payload_bytes = entry_payload;
        chosen->compressed_bytes = LoadField<uint32_t>(h + 0x10);
        chosen->flags = LoadField<uint64_t>(h + 0x28);
        chosen->uncompressed_bytes = LoadField<uint64_t>(h + 0x38);
      }
      e += entry_header + entry_payload;
    }
    pos += header + payload;
  }
  return found ? CUDA_SUCCESS : CUDA_ERROR_NO_BINARY_FOR_GPU;
}

}  // namespace

ImageFormat DetectImageFormat(const void* image) {
  const auto* p = static_cast<const unsigned char*>(image);
  const unsigned char wrapper[] = {0xB1, 0x43, 0x62, 0x46};
  const unsigned char container[] = {0x50, 0xED, 0x55, 0xBA};
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F'};
  if (MatchesMagic(p, wrapper, 4)) return ImageFormat::kFatbinWrapper;
  if (MatchesMagic(p, container, 4)) return ImageFormat::kFatbinContainer;
  if (MatchesMagic(p, elf, 4)) return ImageFormat::kCubin;
  return ImageFormat::kUnknown;
}

uint64_t FatbinExtent(ImageReader read, void* ctx) {
  unsigned char h[kContainerHeaderBytes];
  if (!read(ctx, 0, h, sizeof(h)) || LoadField<uint32_t>(h) != kFatbinContainerMagic) return 0;
  const uint64_t header = LoadField<uint16_t>(h + 6);
  const uint64_t payload = LoadField<uint64_t>(h + 8);
  if (header < kContainerHeaderBytes || payload > kMaxImageBytes) return 0;
  return header + payload;
}

CUresult SelectCubin(const unsigned char* data, size_t size, std::vector<unsigned char>* cubin) {
  if (size >= 4 && LoadField<uint32_t>(data) == kFatbinContainerMagic) {
    Entry entry;
    if (CUresult r = FindCubinEntry(data, size, &entry)) return r;
    return Decompress(entry, cubin);
  }
  if (!LooksLikeCubin(data, size)) return CUDA_ERROR_INVALID_IMAGE;
  cubin->assign(data, data + size);
  return CUDA_SUCCESS;
}

}  // namespace memsim

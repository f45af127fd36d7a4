#include "cubin.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>

#include "image_bytes.h"

namespace memsim {

namespace {

constexpr size_t kElfHeaderBytes = 64;
constexpr size_t kSectionHeaderBytes = 64;
constexpr size_t kSymbolBytes = 24;
constexpr uint32_t kShtSymtab = 2;
constexpr uint32_t kShtNobits = 8;
constexpr uint16_t kShnLoreserve = 0xff00;
constexpr uint8_t kSttObject = 1;

constexpr uint8_t kAttrParamCbank = 0x0a;
constexpr uint8_t kAttrKparamInfo = 0x17;
constexpr uint8_t kAttrCbankParamSize = 0x19;
constexpr uint8_t kFormatSval = 4;  // u16 length, then the payload

struct Section {
  std::string_view name;
  uint32_t type = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint64_t entsize = 0;
};

// The ELF64 header fields that locate the header tables.
struct ElfTables {
  uint64_t phoff, shoff;
  uint16_t phentsize, phnum, shentsize, shnum, shstrndx;
};

ElfTables ReadElfTables(const unsigned char* h) {
  return ElfTables{LoadField<uint64_t>(h + 0x20), LoadField<uint64_t>(h + 0x28),
                   LoadField<uint16_t>(h + 0x36), LoadField<uint16_t>(h + 0x38),
                   LoadField<uint16_t>(h + 0x3a), LoadField<uint16_t>(h + 0x3c),
                   LoadField<uint16_t>(h + 0x3e)};
}

// A section header's fields at `h`.
Section ReadSectionHeader(const unsigned char* h) {
  Section s;
  s.type = LoadField<uint32_t>(h + 4);
  s.offset = LoadField<uint64_t>(h + 0x18);
  s.size = LoadField<uint64_t>(h + 0x20);
  s.link = LoadField<uint32_t>(h + 0x28);
  s.entsize = LoadField<uint64_t>(h + 0x38);
  return s;
}

class ElfView {
 public:
  ElfView(const unsigned char* data, size_t size) : data_(data), size_(size) {}

  CUresult Init() {
    if (!LooksLikeCubin(data_, size_)) return CUDA_ERROR_INVALID_IMAGE;
    const ElfTables t = ReadElfTables(data_);
    if (t.shentsize != kSectionHeaderBytes || t.shstrndx >= t.shnum ||
        !InBounds(t.shoff, uint64_t{t.shnum} * kSectionHeaderBytes, size_) ||
        (t.phnum > 0 && !InBounds(t.phoff, uint64_t{t.phnum} * t.phentsize, size_))) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    sections_.resize(t.shnum);
    for (uint16_t i = 0; i < t.shnum; ++i) {
      Section& s = sections_[i];
      s = ReadSectionHeader(data_ + t.shoff + uint64_t{i} * kSectionHeaderBytes);
      if (s.type != kShtNobits && !InBounds(s.offset, s.size, size_)) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
    }
    const Section& shstr = sections_[t.shstrndx];
    if (shstr.type == kShtNobits) return CUDA_ERROR_INVALID_IMAGE;
    for (uint16_t i = 0; i < t.shnum; ++i) {
      const uint32_t name_offset =
          LoadField<uint32_t>(data_ + t.shoff + uint64_t{i} * kSectionHeaderBytes);
      if (!String(shstr, name_offset, &sections_[i].name)) return CUDA_ERROR_INVALID_IMAGE;
    }
    return CUDA_SUCCESS;
  }

  const std::vector<Section>& sections() const { return sections_; }
  const unsigned char* Bytes(const Section& s) const { return data_ + s.offset; }

  // The NUL-terminated string at `offset` of string table `table`.
  bool String(const Section& table, uint64_t offset, std::string_view* out) const {
    if (table.type == kShtNobits || offset >= table.size) return false;
    const char* begin = reinterpret_cast<const char*>(data_ + table.offset + offset);
    const void* nul = std::memchr(begin, 0, table.size - offset);
    if (nul == nullptr) return false;
    *out = std::string_view(begin, static_cast<const char*>(nul) - begin);
    return true;
  }

 private:
  const unsigned char* const data_;
  const size_t size_;
  std::vector<Section> sections_;
};

// Reads the attribute records of `.nv.info.NAME` into `kernel`.
CUresult ParseKernelInfo(const unsigned char* p, uint64_t n, CubinKernel* kernel) {
  std::map<uint16_t, CubinParam> by_ordinal;
  uint64_t total = 0;
  bool have_total = false;
  uint64_t i = 0;
  while (i < n) {
    if (n - i < 4) return CUDA_ERROR_INVALID_IMAGE;
    const uint8_t format = p[i];
    const uint8_t attribute = p[i + 1];
    const unsigned char* payload = p + i + 2;
    uint64_t payload_bytes = 2;
    uint64_t record_bytes = 4;
    if (format == kFormatSval) {
      payload_bytes = LoadField<uint16_t>(p + i + 2);
      payload = p + i + 4;
      record_bytes = 4 + payload_bytes;
      if (!InBounds(i, record_bytes, n)) return CUDA_ERROR_INVALID_IMAGE;
    } else if (format < 1 || format > kFormatSval) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    if (attribute == kAttrKparamInfo) {
      if (format != kFormatSval || payload_bytes < 12) return CUDA_ERROR_INVALID_IMAGE;
      const uint16_t ordinal = LoadField<uint16_t>(payload + 4);
      CubinParam param{LoadField<uint16_t>(payload + 6), LoadField<uint32_t>(payload + 8) >> 18};
      if (param.size == 0 || !by_ordinal.emplace(ordinal, param).second) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
    } else if (attribute == kAttrCbankParamSize && !have_total) {
      if (format == kFormatSval) return CUDA_ERROR_INVALID_IMAGE;
      total = LoadField<uint16_t>(payload);
      have_total = true;
    } else if (attribute == kAttrParamCbank && !have_total) {
      if (format != kFormatSval || payload_bytes < 8) return CUDA_ERROR_INVALID_IMAGE;
      total = LoadField<uint16_t>(payload + 6);
      have_total = true;
    }
    i += record_bytes;
  }
  uint64_t end = 0;
  uint16_t expected = 0;
  for (const auto& [ordinal, param] : by_ordinal) {
    if (ordinal != expected++) return CUDA_ERROR_INVALID_IMAGE;  // ordinals must be 0..n-1
    end = std::max<uint64_t>(end, uint64_t{param.offset} + param.size);
    kernel->params.push_back(param);
  }
  if (!have_total) total = end;
  if (end > total) return CUDA_ERROR_INVALID_IMAGE;
  kernel->param_bytes = static_cast<uint32_t>(total);
  return CUDA_SUCCESS;
}

bool IsVariableSection(std::string_view name) {
  return name.substr(0, 10) == ".nv.global" || name.substr(0, 12) == ".nv.constant";
}

CUresult ParseVariables(const ElfView& elf, std::vector<CubinVariable>* out) {
  const auto& sections = elf.sections();
  for (const Section& symtab : sections) {
    if (symtab.type != kShtSymtab) continue;
    if (symtab.entsize != kSymbolBytes || symtab.link >= sections.size()) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    const Section& strtab = sections[symtab.link];
    const unsigned char* base = elf.Bytes(symtab);
    for (uint64_t k = 0; k + kSymbolBytes <= symtab.size; k += kSymbolBytes) {
      const unsigned char* sym = base + k;
      const uint8_t type = sym[4] & 0xf;
      const uint16_t shndx = LoadField<uint16_t>(sym + 6);
      if (type != kSttObject || shndx == 0 || shndx >= kShnLoreserve) continue;
      if (shndx >= sections.size()) return CUDA_ERROR_INVALID_IMAGE;
      const Section& home = sections[shndx];
      if (!IsVariableSection(home.name)) continue;
      CubinVariable var;
      std::string_view name;
      if (!elf.String(strtab, LoadField<uint32_t>(sym), &name) || name.empty()) {
        return CUDA_ERROR_INVALID_IMAGE;
      }
      const uint64_t value = LoadField<uint64_t>(sym + 8);
      var.name = std::string(name);
      var.size = LoadField<uint64_t>(sym + 16);
      if (!InBounds(value, var.size, home.size)) return CUDA_ERROR_INVALID_IMAGE;
      if (home.type == kShtNobits) {
        var.init.assign(var.size, 0);
      } else {
        const unsigned char* init = elf.Bytes(home) + value;
        var.init.assign(init, init + var.size);
      }
      out->push_back(std::move(var));
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

bool LooksLikeCubin(const unsigned char* data, size_t size) {
  return size >= kElfHeaderBytes &&
         std::memcmp(data,
                     "\x7f"
                     "ELF",
                     4) == 0 &&
         data[4] == 2 && data[5] == 1 && LoadField<uint16_t>(data + 0x12) == kElfMachineCuda;
}

CUresult ParseCubin(const unsigned char* data, size_t size, Cubin* out) {
  ElfView elf(data, size);
  if (CUresult r = elf.Init()) return r;
  Cubin cubin;
  cubin.sm = (LoadField<uint32_t>(data + 0x30) >> 8) & 0xff;
  constexpr std::string_view kInfoPrefix = ".nv.info.";
  for (const Section& s : elf.sections()) {
    if (s.name.substr(0, kInfoPrefix.size()) != kInfoPrefix) continue;
    if (s.type == kShtNobits || s.name.size() == kInfoPrefix.size()) {
      return CUDA_ERROR_INVALID_IMAGE;
    }
    CubinKernel kernel;
    kernel.name = std::string(s.name.substr(kInfoPrefix.size()));
    if (CUresult r = ParseKernelInfo(elf.Bytes(s), s.size, &kernel)) return r;
    cubin.kernels.push_back(std::move(kernel));
  }
  if (CUresult r = ParseVariables(elf, &cubin.variables)) return r;
  *out = std::move(cubin);
  return CUDA_SUCCESS;
}

uint64_t ElfExtent(ImageReader read, void* ctx) {
  unsigned char h[kElfHeaderBytes];
  if (!read(ctx, 0, h, sizeof(h)) || !LooksLikeCubin(h, sizeof(h))) return 0;
  const ElfTables t = ReadElfTables(h);
  if (t.shentsize != kSectionHeaderBytes || t.shoff > kMaxImageBytes || t.phoff > kMaxImageBytes) {
    return 0;
  }
  uint64_t extent = std::max<uint64_t>(kElfHeaderBytes, t.shoff + uint64_t{t.shnum} * t.shentsize);
  if (t.phnum > 0) extent = std::max(extent, t.phoff + uint64_t{t.phnum} * t.phentsize);
  for (uint16_t i = 0; i < t.shnum; ++i) {
    unsigned char raw[kSectionHeaderBytes];
    if (!read(ctx, t.shoff + uint64_t{i} * kSectionHeaderBytes, raw, sizeof(raw))) return 0;
    const Section s = ReadSectionHeader(raw);
    if (s.type == kShtNobits) continue;
    if (s.offset > kMaxImageBytes || s.size > kMaxImageBytes) return 0;
    extent = std::max(extent, s.offset + s.size);
  }
  return extent <= kMaxImageBytes ? extent : 0;
}

}  // namespace memsim

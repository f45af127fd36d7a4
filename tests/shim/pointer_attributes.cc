// Prints, for cuMemAlloc allocations (1 MiB and 6 MiB, at their base and an
// interior pointer, before and after they were written, and after they were
// freed), the answer of cuPointerGetAttribute and cuPointerGetAttributes for
// every attribute cuda.h declares, one line each, in a form that does not
// depend on addresses: the context as "ctx", pointers relative to the queried
// pointer or the allocation base, buffer and memory block ids by first
// appearance ("id0", "id1", ...). Entries an answer leaves unwritten show as
// "ab" bytes (every buffer is filled with 0xab first). The shim's integration
// test compares the output with and without the shim (Note [pointer
// attributes] in shim/core/pointer_attributes.h).
#include <cuda.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/shim/cuda_check.h"

namespace {

constexpr int kFirst = CU_POINTER_ATTRIBUTE_CONTEXT;
constexpr int kLast = CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE;
constexpr size_t kValueBytes = 64;  // larger than any attribute's value

struct Labels {
  CUcontext ctx = nullptr;
  std::vector<unsigned long long> ids;

  std::string Id(unsigned long long id) {
    if (id == 0) return "0";
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == id) return "id" + std::to_string(i);
    }
    ids.push_back(id);
    return "id" + std::to_string(ids.size() - 1);
  }
};

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", bytes[i]);
    out += buf;
  }
  return out;
}

std::string Relative(uint64_t value, uint64_t ptr, uint64_t base) {
  if (value == 0) return "0";
  if (value == ptr) return "ptr";
  if (value == base) return "base";
  return value > base ? "base+" + std::to_string(value - base) : "other";
}

// The value in a form without addresses; the raw bytes past the value's own
// size are shown too (they must stay 0xab).
std::string Render(int attr, const unsigned char* value, CUdeviceptr ptr, CUdeviceptr base,
                   Labels* labels) {
  uint64_t word;
  std::memcpy(&word, value, sizeof(word));
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (std::memcmp(value, "\xab\xab\xab\xab\xab\xab\xab\xab", 8) == 0) break;
      return word == reinterpret_cast<uint64_t>(labels->ctx) ? "ctx" : Hex(value, 8);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (std::memcmp(value, "\xab\xab\xab\xab\xab\xab\xab\xab", 8) == 0) break;
      return Relative(word, ptr, base);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      if (std::memcmp(value, "\xab\xab\xab\xab\xab\xab\xab\xab", 8) == 0) break;
      return labels->Id(word);
    default:
      break;
  }
  return Hex(value, 24);
}

void Report(const char* name, CUdeviceptr ptr, CUdeviceptr base, Labels* labels) {
  std::vector<std::vector<unsigned char>> multi(kLast + 1,
                                                std::vector<unsigned char>(kValueBytes, 0xab));
  std::vector<CUpointer_attribute> attrs;
  std::vector<void*> data;
  for (int a = kFirst; a <= kLast; ++a) {
    attrs.push_back(static_cast<CUpointer_attribute>(a));
    data.push_back(multi[a].data());
  }
  const CUresult multi_rc =
      cuPointerGetAttributes(static_cast<unsigned>(attrs.size()), attrs.data(), data.data(), ptr);
  for (int a = kFirst; a <= kLast; ++a) {
    std::vector<unsigned char> single(kValueBytes, 0xab);
    const CUresult rc =
        cuPointerGetAttribute(single.data(), static_cast<CUpointer_attribute>(a), ptr);
    std::printf("%s attr %d single rc %d value %s\n", name, a, static_cast<int>(rc),
                Render(a, single.data(), ptr, base, labels).c_str());
    std::printf("%s attr %d multi rc %d value %s\n", name, a, static_cast<int>(multi_rc),
                Render(a, multi[a].data(), ptr, base, labels).c_str());
  }
}

}  // namespace

int main() {
  Labels labels;
  labels.ctx = SetUpPrimaryContext();
  CUdeviceptr small, large;
  CHECK_CU(cuMemAlloc(&small, 1 << 20));
  CHECK_CU(cuMemAlloc(&large, 6 << 20));
  Report("small.base", small, small, &labels);
  Report("small.interior", small + 4096 + 8, small, &labels);
  Report("large.base", large, large, &labels);
  Report("large.interior", large + (5 << 20) + 8, large, &labels);
  CHECK_CU(cuMemsetD8(large, 7, 6 << 20));
  CHECK_CU(cuMemsetD8(small, 9, 1 << 20));
  Report("large.written", large + (3 << 20), large, &labels);
  Report("small.written", small + 100, small, &labels);
  CHECK_CU(cuMemFree(large));
  CHECK_CU(cuMemFree(small));
  CHECK_CU(cuCtxSynchronize());
  Report("large.freed", large, large, &labels);
  // Malformed requests fail before anything is written.
  CUcontext ctx_value = nullptr;
  CUpointer_attribute bad[] = {CU_POINTER_ATTRIBUTE_CONTEXT, static_cast<CUpointer_attribute>(99)};
  void* bad_data[] = {&ctx_value, &ctx_value};
  CHECK_CU(cuMemAlloc(&large, 6 << 20));
  std::printf("malformed rc %d written %d\n",
              static_cast<int>(cuPointerGetAttributes(2, bad, bad_data, large)),
              ctx_value != nullptr ? 1 : 0);
  return 0;
}

#include "cubin.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../testdata/image_files.h"

namespace memsim {
namespace {

using namespace memsim_images;

const CubinKernel* FindKernel(const Cubin& c, const std::string& name) {
  for (const auto& k : c.kernels) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

const CubinVariable* FindVariable(const Cubin& c, const std::string& name) {
  for (const auto& v : c.variables) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

TEST(CubinTest, KernelsAndLayoutsFromNvccCubin) {
  MEMSIM_REQUIRE_IMAGES();
  const auto bytes = ReadImage("kernels.cubin");
  ASSERT_FALSE(bytes.empty());
  Cubin c;
  ASSERT_EQ(ParseCubin(bytes.data(), bytes.size(), &c), CUDA_SUCCESS);
  EXPECT_EQ(c.sm, 90u);
  EXPECT_EQ(c.kernels.size(), 5u);

  const CubinKernel* aligned = FindKernel(c, kAligned16);
  ASSERT_NE(aligned, nullptr);
  const uint32_t offsets[] = {0, 16, 32, 48, 64, 80, 96, 104};
  const uint32_t sizes[] = {4, 16, 3, 16, 1, 16, 2, 8};
  ASSERT_EQ(aligned->params.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(aligned->params[i].offset, offsets[i]) << i;
    EXPECT_EQ(aligned->params[i].size, sizes[i]) << i;
  }
  EXPECT_EQ(aligned->param_bytes, 112u);

  const CubinKernel* scale = FindKernel(c, kScale);
  ASSERT_NE(scale, nullptr);
  ASSERT_EQ(scale->params.size(), 3u);
  EXPECT_EQ(scale->params[1].offset, 8u);
  EXPECT_EQ(scale->params[2].offset, 12u);
  EXPECT_EQ(scale->param_bytes, 16u);
  ASSERT_NE(FindKernel(c, kCLinkage), nullptr);
  EXPECT_EQ(FindKernel(c, kCLinkage)->param_bytes, 8u);
}

TEST(CubinTest, DeviceVariablesWithInitialBytes) {
  MEMSIM_REQUIRE_IMAGES();
  const auto bytes = ReadImage("kernels.cubin");
  Cubin c;
  ASSERT_EQ(ParseCubin(bytes.data(), bytes.size(), &c), CUDA_SUCCESS);
  const CubinVariable* counter = FindVariable(c, "g_counter");
  ASSERT_NE(counter, nullptr);
  ASSERT_EQ(counter->size, 4u);
  int value = 0;
  std::memcpy(&value, counter->init.data(), 4);
  EXPECT_EQ(value, 42);
  const CubinVariable* table = FindVariable(c, "g_table");
  ASSERT_NE(table, nullptr);
  ASSERT_EQ(table->size, 16u);
  float t[4];
  std::memcpy(t, table->init.data(), 16);
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[3], 4.0f);
  const CubinVariable* zero = FindVariable(c, "g_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->init, std::vector<unsigned char>(32, 0));
}

TEST(CubinTest, ExtentFromHeadersCoversTheFile) {
  MEMSIM_REQUIRE_IMAGES();
  auto bytes = ReadImage("kernels.cubin");
  auto read = [](void* ctx, uint64_t offset, void* dst, size_t n) {
    auto* v = static_cast<std::vector<unsigned char>*>(ctx);
    if (offset > v->size() || n > v->size() - offset) return false;
    std::memcpy(dst, v->data() + offset, n);
    return true;
  };
  EXPECT_EQ(ElfExtent(read, &bytes), bytes.size());
  bytes[0] = 0;
  EXPECT_EQ(ElfExtent(read, &bytes), 0u);
}

// Every prefix and every single-byte corruption parses cleanly or fails with INVALID_IMAGE.
TEST(CubinTest, TruncatedAndCorruptedCubinsFailCleanly) {
  MEMSIM_REQUIRE_IMAGES();
  const auto bytes = ReadImage("kernels.cubin");
  ASSERT_FALSE(bytes.empty());
  size_t failures = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<unsigned char> prefix(bytes.begin(), bytes.begin() + n);
    Cubin c;
    const CUresult r = ParseCubin(prefix.data(), prefix.size(), &c);
    ASSERT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE) << n;
    failures += r != CUDA_SUCCESS;
  }
  EXPECT_GT(failures, bytes.size() / 2);
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      auto copy = bytes;
      copy[i] ^= mask;
      Cubin c;
      const CUresult r = ParseCubin(copy.data(), copy.size(), &c);
      ASSERT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE) << i;
    }
  }
}

TEST(CubinTest, RejectsNonCudaElfAndGarbage) {
  const unsigned char garbage[128] = {0x7f, 'E', 'L', 'F', 2, 1};  // e_machine 0, not EM_CUDA
  Cubin c;
  EXPECT_EQ(ParseCubin(garbage, sizeof(garbage), &c), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(ParseCubin(garbage, 3, &c), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_FALSE(LooksLikeCubin(garbage, sizeof(garbage)));
}

}  // namespace
}  // namespace memsim

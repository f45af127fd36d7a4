#include "fatbin.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../testdata/image_files.h"

namespace memsim {
namespace {

using namespace memsim_images;

bool ReadVector(void* ctx, uint64_t offset, void* dst, size_t n) {
  auto* v = static_cast<std::vector<unsigned char>*>(ctx);
  if (offset > v->size() || n > v->size() - offset) return false;
  std::memcpy(dst, v->data() + offset, n);
  return true;
}

uint64_t FirstEntryFlags(const std::vector<unsigned char>& fatbin) {
  uint64_t flags = 0;
  std::memcpy(&flags, fatbin.data() + 16 + 0x28, sizeof(flags));
  return flags;
}

CUresult Select(const std::vector<unsigned char>& image, Cubin* out) {
  std::vector<unsigned char> cubin;
  if (CUresult r = SelectCubin(image.data(), image.size(), &cubin)) return r;
  return ParseCubin(cubin.data(), cubin.size(), out);
}

TEST(FatbinTest, DetectsFormatsWithoutReadingPastAString) {
  const uint32_t wrapper[4] = {kFatbinWrapperMagic, 1, 0, 0};
  const uint32_t container[2] = {kFatbinContainerMagic, 0};
  EXPECT_EQ(DetectImageFormat(wrapper), ImageFormat::kFatbinWrapper);
  EXPECT_EQ(DetectImageFormat(container), ImageFormat::kFatbinContainer);
  EXPECT_EQ(DetectImageFormat("\x7f"
                              "ELF"),
            ImageFormat::kCubin);
  EXPECT_EQ(DetectImageFormat("/tmp/kernels.so"), ImageFormat::kUnknown);
  EXPECT_EQ(DetectImageFormat(""), ImageFormat::kUnknown);
}

TEST(FatbinTest, UncompressedZstdAndLz4GiveTheSameCubin) {
  MEMSIM_REQUIRE_IMAGES();
  const auto plain = ReadImage("plain.fatbin");
  const auto zstd = ReadImage("zstd.fatbin");
  const auto lz4 = ReadImage("lz4.fatbin");
  ASSERT_FALSE(plain.empty() || zstd.empty() || lz4.empty());
  EXPECT_EQ(FirstEntryFlags(plain) & 0xa000, 0u);
  EXPECT_EQ(FirstEntryFlags(zstd) & 0xa000, 0x8000u);  // the cubin entry is zstd-compressed
  EXPECT_EQ(FirstEntryFlags(lz4) & 0xa000, 0x2000u);   // ... LZ4-compressed
  std::vector<unsigned char> a, b, c;
  ASSERT_EQ(SelectCubin(plain.data(), plain.size(), &a), CUDA_SUCCESS);
  ASSERT_EQ(SelectCubin(zstd.data(), zstd.size(), &b), CUDA_SUCCESS);
  ASSERT_EQ(SelectCubin(lz4.data(), lz4.size(), &c), CUDA_SUCCESS);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  Cubin cubin;
  ASSERT_EQ(ParseCubin(a.data(), a.size(), &cubin), CUDA_SUCCESS);
  EXPECT_EQ(cubin.kernels.size(), 5u);
}

TEST(FatbinTest, ChoosesTheSm90CubinAmongArchitectures) {
  MEMSIM_REQUIRE_IMAGES();
  Cubin cubin;
  ASSERT_EQ(Select(ReadImage("multi.fatbin"), &cubin), CUDA_SUCCESS);
  EXPECT_EQ(cubin.sm, 90u);
  // Two containers back to back: the sm_90 cubin is in the second one.
  auto both = ReadImage("sm80.fatbin");
  const auto plain = ReadImage("plain.fatbin");
  const size_t first = both.size();
  both.insert(both.end(), plain.begin(), plain.end());
  ASSERT_EQ(Select(both, &cubin), CUDA_SUCCESS);
  EXPECT_EQ(cubin.sm, 90u);
  EXPECT_EQ(FatbinExtent(ReadVector, &both), first);  // in memory: the first container only
  both.resize(8);
  EXPECT_EQ(FatbinExtent(ReadVector, &both), 0u);
}

TEST(FatbinTest, NoSm90CubinMeansNoBinaryForGpu) {
  MEMSIM_REQUIRE_IMAGES();
  Cubin cubin;
  EXPECT_EQ(Select(ReadImage("sm80.fatbin"), &cubin), CUDA_ERROR_NO_BINARY_FOR_GPU);
  EXPECT_EQ(Select(ReadImage("ptx.fatbin"), &cubin), CUDA_ERROR_NO_BINARY_FOR_GPU);
}

TEST(FatbinTest, BareCubinIsAcceptedAndGarbageIsNot) {
  MEMSIM_REQUIRE_IMAGES();
  Cubin cubin;
  EXPECT_EQ(Select(ReadImage("kernels.cubin"), &cubin), CUDA_SUCCESS);
  const std::vector<unsigned char> garbage(256, 0x5a);
  EXPECT_EQ(Select(garbage, &cubin), CUDA_ERROR_INVALID_IMAGE);
}

// Every prefix fails cleanly and every corrupted byte gives a clean result, for each format.
TEST(FatbinTest, TruncatedAndCorruptedImagesFailCleanly) {
  MEMSIM_REQUIRE_IMAGES();
  for (const char* name : {"plain.fatbin", "zstd.fatbin", "lz4.fatbin", "multi.fatbin"}) {
    const auto bytes = ReadImage(name);
    ASSERT_FALSE(bytes.empty()) << name;
    for (size_t n = 0; n < bytes.size(); n += 7) {
      std::vector<unsigned char> prefix(bytes.begin(), bytes.begin() + n);
      Cubin cubin;
      EXPECT_EQ(Select(prefix, &cubin), CUDA_ERROR_INVALID_IMAGE) << name << " cut at " << n;
    }
    for (size_t i = 0; i < bytes.size(); i += 3) {
      auto copy = bytes;
      copy[i] ^= 0xff;
      Cubin cubin;
      const CUresult r = Select(copy, &cubin);
      EXPECT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_IMAGE ||
                  r == CUDA_ERROR_NO_BINARY_FOR_GPU)
          << name << " byte " << i << ": " << r;
    }
  }
}

}  // namespace
}  // namespace memsim

// libFuzzer target: the shim's kernel-argument decoder (ShimCore::BeforeLaunch over the fake
// driver): parameter layouts from cuFuncGetParamInfo (any sizes, or none: an opaque kernel),
// `kernelParams` arrays, and `extra` option lists (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE /
// unknown keys, a null size pointer) whose words are fuzzer bytes or pointers into live blocks.
// Checked: no crash or sanitizer report; a launch that returns CUDA_SUCCESS has every block that
// a decoded argument word points into mapped (Note [residency before launch], shim_core.cc).
#include <cuda.h>
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "shim/core/control_plane.h"
#include "shim/core/shim_core.h"
#include "shim/testing/fake_driver.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using memvirt::shim::ShimCore;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBlockBytes = 2 * kMiB;
constexpr int kBlocks = 6;                    // 12 MiB of blocks ...
constexpr uint64_t kDeviceBudget = 8 * kMiB;  // ... over 8 MiB of device: launches page
constexpr size_t kMaxParams = 12;
constexpr uint32_t kMaxParamBytes = 256;
constexpr size_t kMaxExtraOptions = 4;

// One fake driver and core for the whole run (FakeDriver is a singleton).
struct World {
  memvirt::shim::testing::FakeDriver fake{64 * kMiB};
  memvirt::shim::StandaloneControlPlane control;
  std::unique_ptr<ShimCore> core;
  CUdeviceptr blocks[kBlocks] = {};
  std::map<std::vector<uint32_t>, CUfunction> functions;
  CUfunction opaque = nullptr;

  World() {
    memvirt::shim::CoreOptions options;
    options.device_budget = kDeviceBudget;
    options.host_budget = 64 * kMiB;
    options.va_bytes = 256 * kMiB;
    options.event_batch = 4;
    options.event_pace = 0;
    Check(ShimCore::Create(&fake.driver(), options, &control, &core) == CUDA_SUCCESS);
    for (CUdeviceptr& b : blocks) Check(core->Alloc(&b, kBlockBytes) == CUDA_SUCCESS);
    opaque = fake.MakeFunction({}, /*opaque=*/true);
  }

  CUfunction FunctionWith(const std::vector<uint32_t>& sizes) {
    auto [it, inserted] = functions.try_emplace(sizes, nullptr);
    if (inserted) it->second = fake.MakeFunction(sizes);
    return it->second;
  }
};

World& TheWorld() {
  static World* world = new World;  // never destroyed: outlives every input
  return *world;
}

// An argument word: a pointer into a block (recorded in `referenced`) or fuzzer bytes.
uint64_t ArgumentWord(FuzzedDataProvider& in, World& w, std::vector<CUdeviceptr>* referenced) {
  if (in.ConsumeBool()) {
    const CUdeviceptr block = w.blocks[in.ConsumeIntegralInRange<int>(0, kBlocks - 1)];
    referenced->push_back(block);
    return block + in.ConsumeIntegralInRange<uint64_t>(0, kBlockBytes - 1);
  }
  return in.ConsumeIntegral<uint64_t>();
}

// Fills `bytes` with argument words at 8-byte offsets (and fuzzer bytes in any tail).
void FillArguments(FuzzedDataProvider& in, World& w, std::vector<uint8_t>* bytes,
                   std::vector<CUdeviceptr>* referenced) {
  for (size_t off = 0; off + 8 <= bytes->size(); off += 8) {
    const uint64_t word = ArgumentWord(in, w, referenced);
    std::memcpy(bytes->data() + off, &word, 8);
  }
  for (size_t off = bytes->size() / 8 * 8; off < bytes->size(); ++off) {
    (*bytes)[off] = in.ConsumeIntegral<uint8_t>();
  }
}

struct Launch {
  CUfunction function = nullptr;
  std::vector<std::vector<uint8_t>> param_storage;
  std::vector<void*> params;
  std::vector<uint8_t> buffer;
  size_t buffer_size = 0;
  std::vector<void*> extra;
  bool decodable = true;  // every word the shim must decode is in `referenced`
  std::vector<CUdeviceptr> referenced;
};

void BuildParams(FuzzedDataProvider& in, World& w, Launch* l) {
  if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    l->function = w.opaque;
    l->decodable = false;
  }
  const size_t n = in.ConsumeIntegralInRange<size_t>(0, kMaxParams);
  std::vector<uint32_t> sizes;
  for (size_t i = 0; i < n; ++i) {
    sizes.push_back(in.ConsumeBool() ? 8 : in.ConsumeIntegralInRange<uint32_t>(0, kMaxParamBytes));
  }
  if (l->function == nullptr) l->function = w.FunctionWith(sizes);
  l->param_storage.resize(n);
  for (size_t i = 0; i < n; ++i) {
    l->param_storage[i].resize(sizes[i]);
    FillArguments(in, w, &l->param_storage[i], &l->referenced);
    // A null entry: allowed for a parameter the kernel does not read (the shim skips it).
    const bool null_entry = in.ConsumeIntegralInRange<int>(0, 15) == 0;
    if (null_entry) l->decodable = false;
    l->params.push_back(null_entry ? nullptr : l->param_storage[i].data());
  }
  l->params.push_back(nullptr);  // never read: keeps data() non-null for n == 0
}

void BuildExtra(FuzzedDataProvider& in, World& w, Launch* l) {
  l->function = w.FunctionWith({8});
  l->buffer.resize(in.ConsumeIntegralInRange<size_t>(0, kMaxParamBytes));
  FillArguments(in, w, &l->buffer, &l->referenced);
  l->buffer_size = l->buffer.size();
  bool has_pointer = false;
  const size_t options = in.ConsumeIntegralInRange<size_t>(0, kMaxExtraOptions);
  for (size_t i = 0; i < options; ++i) {
    switch (in.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        l->extra.push_back(CU_LAUNCH_PARAM_BUFFER_POINTER);
        l->extra.push_back(l->buffer.data());
        has_pointer = true;
        break;
      case 1:
        l->extra.push_back(CU_LAUNCH_PARAM_BUFFER_SIZE);
        l->extra.push_back(&l->buffer_size);
        break;
      case 2:  // a malformed list: the size option without its size
        l->extra.push_back(CU_LAUNCH_PARAM_BUFFER_SIZE);
        l->extra.push_back(nullptr);
        l->decodable = false;
        break;
      default:  // an option the shim does not know
        l->extra.push_back(reinterpret_cast<void*>(in.ConsumeIntegralInRange<uintptr_t>(3, 64)));
        l->extra.push_back(nullptr);
        l->decodable = false;
    }
  }
  l->extra.push_back(CU_LAUNCH_PARAM_END);
  // Without a pointer option the buffer's words are not arguments.
  if (!has_pointer) l->referenced.clear();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  World& w = TheWorld();
  Launch l;
  const bool via_extra = in.ConsumeBool();
  if (via_extra) {
    BuildExtra(in, w, &l);
  } else {
    BuildParams(in, w, &l);
  }
  ShimCore::Ticket ticket;
  const CUresult r = w.core->BeforeLaunch(l.function, via_extra ? nullptr : l.params.data(),
                                          via_extra ? l.extra.data() : nullptr, nullptr,
                                          /*per_thread=*/false, &ticket);
  if (r != CUDA_SUCCESS) return 0;
  // An opaque or undecodable launch backs everything it can; a decoded one backs what it names.
  if (l.decodable) {
    for (CUdeviceptr block : l.referenced) Check(w.fake.IsMapped(block, kBlockBytes));
  }
  return 0;
}

#include "nvme_bench.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "memvirt/nvme/swap_store.h"
#include "memvirt/nvme/uring_io_engine.h"

namespace memvirt::bench {
namespace {

using nvme::IoCompletion;
using nvme::IoOp;
using nvme::IoRequest;
using nvme::UringIoEngine;

struct Flags {
  std::string file;
  uint64_t block = 2 << 20;
  unsigned qd = 16;
  uint64_t size = uint64_t{1} << 30;
  bool json = false;
  bool keep = false;
  bool read_only = false;        // --read-only: read the existing file as it is, no write phase
  bool store = false;            // --store: go through SwapStore (extents, CRC32C, callbacks)
  bool register_buffers = true;  // --no-register-buffers: plain READ/WRITE opcodes
};

// "2M", "1G", "4096", "512k" (binary multiples).
std::optional<uint64_t> ParseSize(std::string s) {
  if (s.empty()) return std::nullopt;
  uint64_t mult = 1;
  switch (s.back()) {
    case 'k':
    case 'K':
      mult = uint64_t{1} << 10;
      break;
    case 'm':
    case 'M':
      mult = uint64_t{1} << 20;
      break;
    case 'g':
    case 'G':
      mult = uint64_t{1} << 30;
      break;
    case 't':
    case 'T':
      mult = uint64_t{1} << 40;
      break;
    default:
      break;
  }
  if (mult != 1) s.pop_back();
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v == 0) return std::nullopt;
  return v * mult;
}

void Usage(const char* name) {
  std::fprintf(stderr,
               "usage: %s --file PATH [--block 2M] [--qd 16] [--size 1G] [--json] [--keep]\n"
               "       [--read-only]  (read an existing file; write_gbps is then 0)\n"
               "       [--store]      (through SwapStore: --block slabs, CRC32C per 2 MiB)\n"
               "       [--no-register-buffers]  (plain READ/WRITE instead of *_FIXED)\n"
               "  sequential O_DIRECT write, then read, of --size bytes in --block requests\n"
               "  with --qd in flight, through the NVMe tier's io_uring engine\n",
               name);
}

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    const size_t eq = arg.find('=');
    const bool has_inline = eq != std::string::npos;
    if (has_inline) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&]() -> std::optional<std::string> {
      if (has_inline) return value;
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    if (arg == "--json") {
      f.json = true;
    } else if (arg == "--keep") {
      f.keep = true;
    } else if (arg == "--read-only") {
      f.read_only = true;
    } else if (arg == "--store") {
      f.store = true;
    } else if (arg == "--no-register-buffers") {
      f.register_buffers = false;
    } else if (arg == "--file") {
      auto v = next();
      if (!v) return std::nullopt;
      f.file = *v;
    } else if (arg == "--block" || arg == "--size") {
      auto v = next();
      auto n = v ? ParseSize(*v) : std::nullopt;
      if (!n) return std::nullopt;
      (arg == "--block" ? f.block : f.size) = *n;
    } else if (arg == "--qd") {
      auto v = next();
      unsigned qd = 0;
      if (!v || !absl::SimpleAtoi(*v, &qd) || qd == 0 || qd > 4096) return std::nullopt;
      f.qd = qd;
    } else {
      return std::nullopt;
    }
  }
  if (f.file.empty() || f.block % nvme::kDirectIoAlignment != 0 || f.block > (1u << 30) ||
      f.size < f.block || (f.store && (f.block % nvme::kExtentBytes != 0 || f.read_only))) {
    return std::nullopt;
  }
  f.size = f.size / f.block * f.block;
  return f;
}

// Note [settle between phases]: untimed. Flushes the device's write cache and idles a second so
// that the read phase does not compete with write-back of the write phase (a shared or
// virtualized disk keeps writing behind the guest's back). compare_fio.sh does the same between
// fio's write and read jobs, so both tools read in the same state.
void Settle(int fd) {
  fdatasync(fd);
  absl::SleepFor(absl::Seconds(1));
}

struct PhaseResult {
  double seconds = 0;
  uint64_t bad_blocks = 0;
};

// Streams [0, size) through `qd` buffers; each buffer is resubmitted at the next offset as soon as
// its previous request completes. Writes stamp each block with its index; reads check the stamp.
absl::StatusOr<PhaseResult> RunPhase(UringIoEngine& engine, IoOp op, const Flags& f,
                                     uint8_t* buffers) {
  const uint64_t blocks = f.size / f.block;
  uint64_t next_block = 0;
  uint64_t done = 0;
  PhaseResult result;
  std::vector<uint64_t> block_of(f.qd, 0);
  auto submit = [&](unsigned slot) -> absl::Status {
    uint8_t* buf = buffers + uint64_t{slot} * f.block;
    const uint64_t block = next_block++;
    block_of[slot] = block;
    if (op == IoOp::kWrite) std::memcpy(buf, &block, sizeof(block));
    return engine.Submit({{{op, 0, block * f.block, buf, f.block, slot}}});
  };
  const absl::Time start = absl::Now();
  for (unsigned slot = 0; slot < f.qd && next_block < blocks; ++slot) {
    if (absl::Status s = submit(slot); !s.ok()) return s;
  }
  std::vector<IoCompletion> cs(f.qd);
  while (done < blocks) {
    absl::StatusOr<size_t> n = engine.Reap(absl::MakeSpan(cs), absl::Seconds(30));
    if (!n.ok()) return n.status();
    if (*n == 0) return absl::DeadlineExceededError("no completion within 30 s");
    for (size_t i = 0; i < *n; ++i) {
      if (!cs[i].status.ok()) return cs[i].status;
      const unsigned slot = static_cast<unsigned>(cs[i].tag);
      if (op == IoOp::kRead) {
        uint64_t stamp;
        std::memcpy(&stamp, buffers + uint64_t{slot} * f.block, sizeof(stamp));
        result.bad_blocks += !f.read_only && stamp != block_of[slot];
      }
      ++done;
      if (next_block < blocks) {
        if (absl::Status s = submit(slot); !s.ok()) return s;
      }
    }
  }
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return result;
}

// The same stream through SwapStore: --block slabs, qd in flight, Put then Get. Includes what
// the daemon pays on top of the engine: extent allocation, CRC32C of every 2 MiB on both sides
// (on the submitting thread for Puts, the completion thread for Gets), callbacks.
absl::StatusOr<std::pair<PhaseResult, PhaseResult>> RunStore(UringIoEngine& engine, const Flags& f,
                                                             uint8_t* buffers, int fd) {
  auto store = nvme::SwapStore::Create(&engine, nvme::SwapStoreOptions{});
  if (!store.ok()) return store.status();
  constexpr nvme::TenantId kTenant = 1;
  const uint64_t slabs = f.size / f.block;
  std::vector<nvme::SlabId> ids(slabs, 0);
  absl::Mutex mu;
  absl::CondVar freed;
  std::vector<bool> busy(f.qd, false);
  absl::Status first_error;
  uint64_t bad = 0;

  auto phase = [&](bool put) -> absl::StatusOr<PhaseResult> {
    const absl::Time start = absl::Now();
    for (uint64_t i = 0; i < slabs; ++i) {
      const unsigned slot = static_cast<unsigned>(i % f.qd);
      uint8_t* buf = buffers + uint64_t{slot} * f.block;
      {
        absl::MutexLock lock(&mu);
        while (busy[slot]) freed.Wait(&mu);
        if (!first_error.ok()) return first_error;
        busy[slot] = true;
      }
      auto done = [&, slot, i, buf, put](absl::Status s) {
        uint64_t stamp = 0;
        if (!put && s.ok()) std::memcpy(&stamp, buf, sizeof(stamp));
        absl::MutexLock lock(&mu);
        if (!s.ok() && first_error.ok()) first_error = s;
        bad += !put && s.ok() && stamp != i;
        busy[slot] = false;
        freed.SignalAll();
      };
      absl::Status started;
      if (put) {
        std::memcpy(buf, &i, sizeof(i));
        absl::StatusOr<nvme::SlabId> id =
            (*store)->StartPut(kTenant, absl::MakeConstSpan(buf, f.block), done);
        if (id.ok()) ids[i] = *id;
        started = id.status();
      } else {
        started = (*store)->StartGet(kTenant, ids[i], absl::MakeSpan(buf, f.block), done);
      }
      if (!started.ok()) return started;
    }
    absl::MutexLock lock(&mu);
    for (unsigned slot = 0; slot < f.qd; ++slot) {
      while (busy[slot]) freed.Wait(&mu);
    }
    if (!first_error.ok()) return first_error;
    PhaseResult r;
    r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    r.bad_blocks = bad;
    return r;
  };
  absl::StatusOr<PhaseResult> w = phase(true);
  if (!w.ok()) return w.status();
  Settle(fd);
  absl::StatusOr<PhaseResult> r = phase(false);
  if (!r.ok()) return r.status();
  return std::make_pair(*w, *r);
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "memvirt-bench nvme: %s\n", what.c_str());
  return 1;
}

}  // namespace

int NvmeMain(int argc, char** argv) {
  const char* name = argc > 0 ? argv[0] : "memvirt-bench nvme";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      Usage(name);
      return 0;
    }
  }
  std::optional<Flags> flags = ParseFlags(argc, argv);
  if (!flags) {
    Usage(name);
    return 2;
  }
  const Flags& f = *flags;

  struct stat st;
  const bool existed = stat(f.file.c_str(), &st) == 0;
  bool direct = true;
  int fd = open(f.file.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EINVAL) {
    direct = false;
    fd = open(f.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  }
  if (fd < 0) return Fail(absl::StrFormat("open %s: %s", f.file, std::strerror(errno)));
  struct Cleanup {
    int fd;
    std::string path;
    bool remove;
    ~Cleanup() {
      close(fd);
      if (remove) unlink(path.c_str());
    }
  } cleanup{fd, f.file, !existed && !f.keep};
  if (f.read_only) {
    if (!existed || static_cast<uint64_t>(st.st_size) < f.size) {
      return Fail("--read-only needs an existing file of at least --size bytes");
    }
  } else if (fallocate(fd, 0, 0, static_cast<off_t>(f.size)) != 0 &&
             ftruncate(fd, static_cast<off_t>(f.size)) != 0) {
    return Fail(absl::StrFormat("sizing %s: %s", f.file, std::strerror(errno)));
  }

  void* mem = nullptr;
  const uint64_t pool = uint64_t{f.qd} * f.block;
  if (posix_memalign(&mem, nvme::kDirectIoAlignment, pool) != 0) return Fail("out of memory");
  std::unique_ptr<uint8_t, decltype(&std::free)> buffers(static_cast<uint8_t*>(mem), &std::free);
  for (uint64_t i = 0; i < pool; ++i) buffers.get()[i] = static_cast<uint8_t>(i * 131 + 7);

  nvme::UringOptions options;
  options.queue_depth = f.qd;
  auto engine = UringIoEngine::Create({{fd, f.size}}, options);
  if (!engine.ok()) return Fail(engine.status().ToString());
  const iovec region = {buffers.get(), pool};
  const bool registered = f.register_buffers && pool <= (uint64_t{1} << 30) &&
                          (*engine)->RegisterBuffers({&region, 1}).ok();

  absl::StatusOr<PhaseResult> w = PhaseResult{};
  absl::StatusOr<PhaseResult> r = PhaseResult{};
  if (f.store) {
    auto wr = RunStore(**engine, f, buffers.get(), fd);
    if (!wr.ok()) return Fail("store: " + wr.status().ToString());
    w = wr->first;
    r = wr->second;
  } else if (!f.read_only) {
    w = RunPhase(**engine, IoOp::kWrite, f, buffers.get());
  }
  if (!w.ok()) return Fail("write: " + w.status().ToString());
  if (!f.read_only && !f.store) Settle(fd);
  if (!f.store) r = RunPhase(**engine, IoOp::kRead, f, buffers.get());
  if (!r.ok()) return Fail("read: " + r.status().ToString());

  const double write_gbps = f.read_only ? 0.0 : static_cast<double>(f.size) / w->seconds / 1e9;
  const double read_gbps = static_cast<double>(f.size) / r->seconds / 1e9;
  if (f.json) {
    std::printf(
        "{\"write_gbps\":%.3f,\"read_gbps\":%.3f,\"block\":%llu,\"qd\":%u,\"bytes\":%llu,"
        "\"direct\":%s,\"registered_buffers\":%s,\"bad_blocks\":%llu,\"mode\":\"%s\","
        "\"engine\":\"%s\"}\n",
        write_gbps, read_gbps, static_cast<unsigned long long>(f.block), f.qd,
        static_cast<unsigned long long>(f.size), direct ? "true" : "false",
        registered ? "true" : "false", static_cast<unsigned long long>(r->bad_blocks),
        f.store ? "swap-store+crc32c" : "engine", (*engine)->description().c_str());
  } else {
    std::printf("engine:  %s\n", (*engine)->description().c_str());
    std::printf("file:    %s (%llu bytes, block %llu, qd %u)\n", f.file.c_str(),
                static_cast<unsigned long long>(f.size), static_cast<unsigned long long>(f.block),
                f.qd);
    std::printf("write:   %.3f GB/s\nread:    %.3f GB/s\n", write_gbps, read_gbps);
    if (r->bad_blocks)
      std::printf("verify:  %llu bad blocks\n", static_cast<unsigned long long>(r->bad_blocks));
  }
  return r->bad_blocks == 0 ? 0 : 1;
}

}  // namespace memvirt::bench

// The launch layout shared by memvirt-replay and its kernel module.
//
// One kernel, memvirt_replay_kernel, stands for every trace kernel. Its
// arguments are plain values and device pointers (so an interposer sees the
// tensors by decoding arguments):
//   duration_ns, slot_count, write_mask, mismatch counter pointer,
//   kSlots tensor pointers, kSlots byte counts, kSlots tags.
// Slot i is read (verified) if bit i of write_mask is clear, written
// otherwise; reads are verified before any write. Word w of a tensor holding
// tag t is ReplayPattern(t, w); a tag is (tensor id << 24) | version.
//
// Thread safety: constants and a pure function.

#ifndef MEMVIRT_BENCH_REPLAY_REPLAY_ABI_H_
#define MEMVIRT_BENCH_REPLAY_REPLAY_ABI_H_

#include <cstdint>

namespace memvirt::replay {

inline constexpr int kSlots = 16;
inline constexpr uint64_t kVersionBits = 24;
inline constexpr char kKernelName[] = "memvirt_replay_kernel";

inline uint64_t ReplayTag(uint64_t tensor_id, uint64_t version) {
  return (tensor_id << kVersionBits) | (version & ((uint64_t{1} << kVersionBits) - 1));
}

// splitmix64 of (tag, word index): cheap, and differs between versions.
inline uint64_t ReplayPattern(uint64_t tag, uint64_t word) {
  uint64_t z = tag * 0x9e3779b97f4a7c15ULL + word + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace memvirt::replay

#endif  // MEMVIRT_BENCH_REPLAY_REPLAY_ABI_H_

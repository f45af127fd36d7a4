// How many chunks one eviction moves, as a function of the device budget.
//
// Note [eviction batches]
//   A miss on a full device needs one chunk. Evicting more per host wait
//   amortizes the wait and the copy setup (Note [eviction] in shim_core.h),
//   and starting the next batch's page-outs at once keeps the copy stream busy
//   (Note [pipelined page-out]); both are speculation: every extra victim
//   whose data is live crosses the link (the shim keeps no clean host copy: a
//   page-in releases the host slot, so each page-out is a full write back),
//   and a look-ahead page-out cancelled because its chunk was touched again
//   has crossed the link for nothing. The bytes are worth it only while the
//   extra victims are a small part of device memory, i.e. the least likely
//   to be needed. So:
//   * a batch is the needed chunk plus speculation of at most 1/16 of the
//     budget: clamp(budget / 16, 1, 8) for the first eviction of a miss and
//     clamp(budget / 16, 1, 16) when the same miss has to evict again
//     (sustained pressure). Below 32 chunks (64 MiB) a miss evicts exactly
//     one chunk; the previous fixed 8 and 16 are reached at 128 and 256
//     chunks;
//   * the look-ahead page-out (one more batch) starts only from 512 chunks
//     (1 GiB): there batch and look-ahead together (at most 31 chunks beyond
//     the one needed) stay within 1/16 of the budget (32 chunks).
//   So a miss never evicts or writes back more than the needed chunk plus
//   budget / 16 chunks. The calibration (docs/policy.md, Calibration against
//   the mechanism) measured what the fixed sizes did at budgets of 10 to 41
//   chunks: up to 2.8x the d2h bytes the policy needs, most of them chunks
//   paged out only to be paged back in.
#ifndef MEMVIRT_SHIM_CORE_EVICTION_SIZING_H_
#define MEMVIRT_SHIM_CORE_EVICTION_SIZING_H_

#include <algorithm>
#include <cstdint>

namespace memvirt::shim {

// Speculative victims per miss are at most budget / kSpeculationShare.
inline constexpr uint32_t kSpeculationShare = 16;
inline constexpr uint32_t kFirstBatchMax = 8;
inline constexpr uint32_t kSustainedBatchMax = 16;
// The smallest budget (chunks) with a look-ahead page-out.
inline constexpr uint32_t kLookaheadMinChunks = 512;

struct EvictionSizing {
  uint32_t batch = 1;      // victims per host wait, the needed one included (>= 1)
  uint32_t lookahead = 0;  // page-outs started right after the batch (0: none)
};

// Note [eviction batches]. `budget_chunks`: the device chunks the core may
// hold; `sustained`: the miss already evicted once and still found no chunk.
// `lookahead_min_chunks`: kLookaheadMinChunks outside tests.
constexpr EvictionSizing SizeEviction(uint32_t budget_chunks, bool sustained,
                                      uint32_t lookahead_min_chunks = kLookaheadMinChunks) {
  EvictionSizing s;
  s.batch = std::clamp<uint32_t>(budget_chunks / kSpeculationShare, 1,
                                 sustained ? kSustainedBatchMax : kFirstBatchMax);
  s.lookahead = budget_chunks >= lookahead_min_chunks ? s.batch : 0;
  return s;
}

}  // namespace memvirt::shim

#endif  // MEMVIRT_SHIM_CORE_EVICTION_SIZING_H_

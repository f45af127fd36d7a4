// Synthetic GPT-style training trace (memtrace-v1): one iteration of
// forward, backward and an Adam step over a decoder-only transformer.
//
// Tensors: per layer, persistent weights (attention QKV and output
// projection, two MLP matrices, two layer norms) with Adam moments
// (kind "optimizer"); activations born in the forward pass and freed after
// their last backward use; weight gradients born in backward and freed after
// the optimizer step; transient activation gradients; one-kernel workspaces
// for attention. Embedding and (tied) LM head with logits.
//
// Durations: each kernel takes max(flops / peak, bytes moved / HBM
// bandwidth) plus a fixed launch cost, so matrix multiplies are compute
// bound and element-wise kernels memory bound.
//
// Thread safety: pure function.

#ifndef MEMVIRT_BENCH_TRACEGEN_GPT_TRACE_H_
#define MEMVIRT_BENCH_TRACEGEN_GPT_TRACE_H_

#include <cstdint>

#include "memvirt/trace/memtrace.h"

namespace memvirt::tracegen {

struct GptConfig {
  int layers = 24;
  int64_t hidden = 1024;
  int64_t heads = 16;
  int64_t seq = 1024;
  int64_t batch = 8;
  int64_t vocab = 50304;
  int64_t bytes_per_element = 2;            // activations and weights (fp16/bf16)
  int64_t optimizer_bytes_per_element = 4;  // Adam moments (fp32)
  double peak_tflops = 150;                 // sustained matrix throughput
  double hbm_gbps = 2000;                   // device memory bandwidth, GB/s
  double launch_us = 4;
};

// REQUIRES: positive sizes; hidden divisible by heads.
trace::Trace MakeGptTrace(const GptConfig& config);

}  // namespace memvirt::tracegen

#endif  // MEMVIRT_BENCH_TRACEGEN_GPT_TRACE_H_

#include "gpt_trace.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace memvirt::tracegen {
namespace {

class Builder {
 public:
  explicit Builder(const GptConfig& c) : c_(c) {}

  uint64_t Tensor(int64_t bytes, const std::string& kind, bool persistent) {
    const uint64_t id = trace_.tensors.size();
    trace_.tensors.push_back({id, static_cast<uint64_t>(bytes), kind, persistent});
    return id;
  }

  // A kernel with `flops` of work; bytes moved are the tensors it touches.
  void Kernel(const std::string& name, double flops, std::vector<uint64_t> reads,
              std::vector<uint64_t> writes) {
    double bytes = 0;
    for (uint64_t t : reads) bytes += static_cast<double>(trace_.tensors[t].bytes);
    for (uint64_t t : writes) bytes += static_cast<double>(trace_.tensors[t].bytes);
    const double compute_us = flops / (c_.peak_tflops * 1e6);
    const double memory_us = bytes / (c_.hbm_gbps * 1e3);
    const uint64_t id = trace_.kernels.size();
    for (uint64_t t : reads) last_use_[t] = id;
    for (uint64_t t : writes) last_use_[t] = id;
    trace_.kernels.push_back({id, name, std::max(compute_us, memory_us) + c_.launch_us,
                              std::move(reads), std::move(writes)});
  }

  trace::Trace Finish() {
    for (const auto& [tensor, kernel] : last_use_) {
      if (!trace_.tensors[tensor].persistent) trace_.frees.push_back({tensor, kernel});
    }
    std::sort(trace_.frees.begin(), trace_.frees.end(),
              [](const trace::TraceFree& a, const trace::TraceFree& b) {
                return a.after_kernel != b.after_kernel ? a.after_kernel < b.after_kernel
                                                        : a.tensor < b.tensor;
              });
    return std::move(trace_);
  }

  trace::Trace& trace() { return trace_; }

 private:
  const GptConfig& c_;
  trace::Trace trace_;
  std::map<uint64_t, uint64_t> last_use_;
};

struct Layer {
  uint64_t ln1, qkv, proj, ln2, fc1, fc2;  // weights
  std::vector<uint64_t> weights() const { return {ln1, qkv, proj, ln2, fc1, fc2}; }
};

}  // namespace

trace::Trace MakeGptTrace(const GptConfig& c) {
  Builder b(c);
  const int64_t e = c.bytes_per_element;
  const int64_t tokens = c.batch * c.seq;
  const int64_t h = c.hidden;
  const double t = static_cast<double>(tokens);
  const double hd = static_cast<double>(h);
  b.trace().model = absl::StrCat("GPT-", c.layers, "L-", h, "H");
  b.trace().batch = c.batch;
  b.trace().source = "memvirt-tracegen (synthetic)";
  b.trace().iterations = 1;

  // Weights and their optimizer state.
  const uint64_t embed = b.Tensor(c.vocab * h * e, "weight", true);
  std::vector<Layer> layers(c.layers);
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> adam;  // weight -> (m, v)
  auto weight = [&](int64_t elements) {
    const uint64_t w = b.Tensor(elements * e, "weight", true);
    const int64_t ob = elements * c.optimizer_bytes_per_element;
    adam[w] = {b.Tensor(ob, "optimizer", true), b.Tensor(ob, "optimizer", true)};
    return w;
  };
  adam[embed] = {b.Tensor(c.vocab * h * c.optimizer_bytes_per_element, "optimizer", true),
                 b.Tensor(c.vocab * h * c.optimizer_bytes_per_element, "optimizer", true)};
  for (Layer& l : layers) {
    l.ln1 = weight(2 * h);
    l.qkv = weight(3 * h * h);
    l.proj = weight(h * h);
    l.ln2 = weight(2 * h);
    l.fc1 = weight(4 * h * h);
    l.fc2 = weight(4 * h * h);
  }
  const uint64_t ln_f = weight(2 * h);

  // Forward. Saved activations per layer, for backward.
  struct Saved {
    uint64_t x, a_ln1, a_qkv, a_probs, a_attn, x_mid, a_ln2, a_fc1, a_gelu;
  };
  std::vector<Saved> saved(c.layers);
  const uint64_t ids = b.Tensor(tokens * 4, "activation", false);
  b.Kernel("LoadBatch", 0, {}, {ids});
  uint64_t x = b.Tensor(tokens * h * e, "activation", false);
  b.Kernel("Embedding_Forward", 0, {ids, embed}, {x});
  const double attn_flops = 4.0 * static_cast<double>(c.batch) * static_cast<double>(c.seq) *
                            static_cast<double>(c.seq) * hd;
  const int64_t scores_bytes = c.batch * c.heads * c.seq * c.seq * e;
  for (int i = 0; i < c.layers; ++i) {
    const Layer& l = layers[i];
    Saved& s = saved[i];
    s.x = x;
    s.a_ln1 = b.Tensor(tokens * h * e, "activation", false);
    b.Kernel("LayerNorm_Forward", 5 * t * hd, {x, l.ln1}, {s.a_ln1});
    s.a_qkv = b.Tensor(tokens * 3 * h * e, "activation", false);
    b.Kernel("QKV_MatMul_Forward", 2 * t * hd * 3 * hd, {s.a_ln1, l.qkv}, {s.a_qkv});
    const uint64_t ws = b.Tensor(scores_bytes, "workspace", false);
    s.a_probs = b.Tensor(scores_bytes, "activation", false);
    b.Kernel("Attention_Scores_Softmax", attn_flops / 2, {s.a_qkv}, {ws, s.a_probs});
    s.a_attn = b.Tensor(tokens * h * e, "activation", false);
    b.Kernel("Attention_Context", attn_flops / 2, {s.a_probs, s.a_qkv}, {s.a_attn});
    s.x_mid = b.Tensor(tokens * h * e, "activation", false);
    b.Kernel("Proj_MatMul_Residual", 2 * t * hd * hd, {s.a_attn, l.proj, x}, {s.x_mid});
    s.a_ln2 = b.Tensor(tokens * h * e, "activation", false);
    b.Kernel("LayerNorm_Forward", 5 * t * hd, {s.x_mid, l.ln2}, {s.a_ln2});
    s.a_fc1 = b.Tensor(tokens * 4 * h * e, "activation", false);
    b.Kernel("FC1_MatMul_Forward", 8 * t * hd * hd, {s.a_ln2, l.fc1}, {s.a_fc1});
    s.a_gelu = b.Tensor(tokens * 4 * h * e, "activation", false);
    b.Kernel("GELU_Forward", 8 * t * hd, {s.a_fc1}, {s.a_gelu});
    const uint64_t next = b.Tensor(tokens * h * e, "activation", false);
    b.Kernel("FC2_MatMul_Residual", 8 * t * hd * hd, {s.a_gelu, l.fc2, s.x_mid}, {next});
    x = next;
  }
  const uint64_t xf = b.Tensor(tokens * h * e, "activation", false);
  b.Kernel("LayerNorm_Forward", 5 * t * hd, {x, ln_f}, {xf});
  const double head_flops = 2 * t * hd * static_cast<double>(c.vocab);
  const uint64_t logits = b.Tensor(tokens * c.vocab * e, "activation", false);
  b.Kernel("LMHead_MatMul_Forward", head_flops, {xf, embed}, {logits});
  const uint64_t dlogits = b.Tensor(tokens * c.vocab * e, "gradient", false);
  b.Kernel("CrossEntropy_Forward_Backward", 4 * t * static_cast<double>(c.vocab), {logits, ids},
           {dlogits});

  // Backward.
  std::map<uint64_t, uint64_t> grad;  // weight -> gradient tensor
  auto wgrad = [&](uint64_t w) {
    const uint64_t g =
        b.Tensor(static_cast<int64_t>(b.trace().tensors[w].bytes), "gradient", false);
    grad[w] = g;
    return g;
  };
  auto act_grad = [&](int64_t bytes) { return b.Tensor(bytes, "gradient", false); };
  uint64_t dxf = act_grad(tokens * h * e);
  b.Kernel("LMHead_Backward_Input", head_flops, {dlogits, embed}, {dxf});
  b.Kernel("LMHead_Backward_Weight", head_flops, {dlogits, xf}, {wgrad(embed)});
  uint64_t dx = act_grad(tokens * h * e);
  b.Kernel("LayerNorm_Backward", 8 * t * hd, {dxf, x, ln_f}, {dx, wgrad(ln_f)});
  for (int i = c.layers - 1; i >= 0; --i) {
    const Layer& l = layers[i];
    const Saved& s = saved[i];
    const uint64_t dgelu = act_grad(tokens * 4 * h * e);
    b.Kernel("FC2_Backward_Input", 8 * t * hd * hd, {dx, l.fc2}, {dgelu});
    b.Kernel("FC2_Backward_Weight", 8 * t * hd * hd, {dx, s.a_gelu}, {wgrad(l.fc2)});
    const uint64_t dfc1 = act_grad(tokens * 4 * h * e);
    b.Kernel("GELU_Backward", 8 * t * hd, {dgelu, s.a_fc1}, {dfc1});
    const uint64_t dln2 = act_grad(tokens * h * e);
    b.Kernel("FC1_Backward_Input", 8 * t * hd * hd, {dfc1, l.fc1}, {dln2});
    b.Kernel("FC1_Backward_Weight", 8 * t * hd * hd, {dfc1, s.a_ln2}, {wgrad(l.fc1)});
    const uint64_t dmid = act_grad(tokens * h * e);
    b.Kernel("LayerNorm_Backward_Residual", 8 * t * hd, {dln2, s.x_mid, l.ln2, dx},
             {dmid, wgrad(l.ln2)});
    const uint64_t dattn = act_grad(tokens * h * e);
    b.Kernel("Proj_Backward_Input", 2 * t * hd * hd, {dmid, l.proj}, {dattn});
    b.Kernel("Proj_Backward_Weight", 2 * t * hd * hd, {dmid, s.a_attn}, {wgrad(l.proj)});
    const uint64_t dqkv = act_grad(tokens * 3 * h * e);
    const uint64_t ws = b.Tensor(scores_bytes, "workspace", false);
    b.Kernel("Attention_Backward", 2 * attn_flops, {dattn, s.a_probs, s.a_qkv}, {ws, dqkv});
    const uint64_t dln1 = act_grad(tokens * h * e);
    b.Kernel("QKV_Backward_Input", 2 * t * hd * 3 * hd, {dqkv, l.qkv}, {dln1});
    b.Kernel("QKV_Backward_Weight", 2 * t * hd * 3 * hd, {dqkv, s.a_ln1}, {wgrad(l.qkv)});
    const uint64_t dprev = act_grad(tokens * h * e);
    b.Kernel("LayerNorm_Backward_Residual", 8 * t * hd, {dln1, s.x, l.ln1, dmid},
             {dprev, wgrad(l.ln1)});
    dx = dprev;
  }
  // Tied embedding: the input side accumulates into the LM head's gradient.
  b.Kernel("Embedding_Backward", 2 * t * hd, {dx, ids, grad[embed]}, {grad[embed]});

  // Adam step, one kernel per weight: reads gradient and moments, updates
  // weight and moments in place.
  std::vector<uint64_t> order = {embed};
  for (const Layer& l : layers)
    for (uint64_t w : l.weights()) order.push_back(w);
  order.push_back(ln_f);
  for (uint64_t w : order) {
    const auto [m, v] = adam[w];
    b.Kernel("Adam_Step", 10.0 * static_cast<double>(b.trace().tensors[w].bytes) / e,
             {grad[w], m, v, w}, {w, m, v});
  }
  return b.Finish();
}

}  // namespace memvirt::tracegen

#include "gpt_trace.h"

#include <gtest/gtest.h>

#include <set>

namespace memvirt::tracegen {
namespace {

GptConfig Small() {
  GptConfig c;
  c.layers = 3;
  c.hidden = 64;
  c.heads = 4;
  c.seq = 32;
  c.batch = 2;
  c.vocab = 100;
  return c;
}

TEST(GptTraceTest, WellFormedAndParsesBack) {
  trace::Trace t = MakeGptTrace(Small());
  auto back = trace::ParseTrace(trace::FormatTrace(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kernels.size(), t.kernels.size());
  EXPECT_EQ(back->tensors.size(), t.tensors.size());
  for (const auto& k : t.kernels) EXPECT_GT(k.us, 0);
}

TEST(GptTraceTest, LifetimesFollowTraining) {
  GptConfig c = Small();
  trace::Trace t = MakeGptTrace(c);
  std::set<std::string> kinds;
  int persistent_weights = 0, optimizer = 0;
  for (const auto& tensor : t.tensors) {
    kinds.insert(tensor.kind);
    if (tensor.kind == "weight") {
      EXPECT_TRUE(tensor.persistent);
      ++persistent_weights;
    }
    if (tensor.kind == "optimizer") ++optimizer;
    if (tensor.kind == "activation" || tensor.kind == "gradient" || tensor.kind == "workspace") {
      EXPECT_FALSE(tensor.persistent);
    }
  }
  EXPECT_EQ(kinds,
            (std::set<std::string>{"activation", "gradient", "optimizer", "weight", "workspace"}));
  // 6 weights per layer + embedding + final norm; two Adam moments each.
  EXPECT_EQ(persistent_weights, 6 * c.layers + 2);
  EXPECT_EQ(optimizer, 2 * persistent_weights);
  // Every non-persistent tensor is freed exactly once, after its last use.
  std::vector<int64_t> last_use(t.tensors.size(), -1);
  for (const auto& k : t.kernels) {
    for (uint64_t id : k.reads) last_use[id] = static_cast<int64_t>(k.id);
    for (uint64_t id : k.writes) last_use[id] = static_cast<int64_t>(k.id);
  }
  std::set<uint64_t> freed;
  for (const auto& f : t.frees) {
    EXPECT_TRUE(freed.insert(f.tensor).second);
    EXPECT_EQ(static_cast<int64_t>(f.after_kernel), last_use[f.tensor]);
  }
  for (const auto& tensor : t.tensors) {
    if (!tensor.persistent) {
      EXPECT_TRUE(freed.count(tensor.id)) << tensor.id;
    }
  }
  // Activations saved in the forward pass are read again in the backward
  // pass: the first saved activation lives past the middle of the iteration.
  const uint64_t first_activation = t.kernels[1].writes[0];
  EXPECT_GT(last_use[first_activation], static_cast<int64_t>(t.kernels.size() / 2));
}

TEST(GptTraceTest, Deterministic) {
  EXPECT_EQ(trace::FormatTrace(MakeGptTrace(Small())), trace::FormatTrace(MakeGptTrace(Small())));
}

}  // namespace
}  // namespace memvirt::tracegen

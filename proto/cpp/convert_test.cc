// Every message survives encode -> wire bytes -> decode unchanged, and the fields removed from
// memvirt.v1 stay reserved (an old peer's bytes still parse).
#include "memvirt/protocol/convert.h"

#include <string>

#include "gtest/gtest.h"

namespace memvirt::protocol {
namespace {

template <typename Proto>
Proto ThroughWire(const Proto& p) {
  std::string bytes;
  EXPECT_TRUE(p.SerializeToString(&bytes));
  Proto back;
  EXPECT_TRUE(back.ParseFromString(bytes));
  return back;
}

GpuUsage Usage(const std::string& uuid) {
  return {.gpu_uuid = uuid,
          .resident_bytes = 1,
          .host_bytes = 2,
          .nvme_bytes = 3,
          .paged_in_bytes = 4,
          .paged_out_bytes = 5,
          .nvme_read_bytes = 6,
          .nvme_write_bytes = 7};
}

void ExpectSame(const GpuUsage& a, const GpuUsage& b) {
  EXPECT_EQ(a.gpu_uuid, b.gpu_uuid);
  EXPECT_EQ(a.resident_bytes, b.resident_bytes);
  EXPECT_EQ(a.host_bytes, b.host_bytes);
  EXPECT_EQ(a.nvme_bytes, b.nvme_bytes);
  EXPECT_EQ(a.paged_in_bytes, b.paged_in_bytes);
  EXPECT_EQ(a.paged_out_bytes, b.paged_out_bytes);
  EXPECT_EQ(a.nvme_read_bytes, b.nvme_read_bytes);
  EXPECT_EQ(a.nvme_write_bytes, b.nvme_write_bytes);
}

TEST(ProtocolConvertTest, RegistrationRoundTrips) {
  Registration r;
  r.protocol_version = kProtocolVersion;
  r.gpus.push_back({"GPU-a", 80, 40, 10});
  r.gpus.push_back({"GPU-b", 16, 0, 0});
  r.process_name = "train";
  r.host_demand_bytes = 99;
  r.usage.push_back(Usage("GPU-a"));
  v1::RegisterRequest p;
  ToProto(r, &p);
  const Registration back = FromProto(ThroughWire(p));
  EXPECT_EQ(back.protocol_version, kProtocolVersion);
  ASSERT_EQ(back.gpus.size(), 2u);
  EXPECT_EQ(back.gpus[0].gpu_uuid, "GPU-a");
  EXPECT_EQ(back.gpus[0].device_memory_bytes, 80u);
  EXPECT_EQ(back.gpus[0].demand_bytes, 40u);
  EXPECT_EQ(back.gpus[0].min_bytes, 10u);
  EXPECT_EQ(back.gpus[1].gpu_uuid, "GPU-b");
  EXPECT_EQ(back.process_name, "train");
  EXPECT_EQ(back.host_demand_bytes, 99u);
  ASSERT_EQ(back.usage.size(), 1u);
  ExpectSame(back.usage[0], Usage("GPU-a"));

  v1::AddGpusRequest add;
  ToProto(r.gpus, &add);
  const std::vector<GpuClaim> claims = FromProto(ThroughWire(add));
  ASSERT_EQ(claims.size(), 2u);
  EXPECT_EQ(claims[1].device_memory_bytes, 16u);
}

TEST(ProtocolConvertTest, HintsAndAcksRoundTrip) {
  HintBatch b;
  b.iteration = 7;
  b.allocs.push_back({1, "GPU-a", 4096, false});
  b.allocs.push_back({2, "GPU-b", 8192, true});
  b.usage.push_back(Usage("GPU-a"));
  v1::HintBatch p;
  ToProto(b, &p);
  const HintBatch back = FromProto(ThroughWire(p));
  EXPECT_EQ(back.iteration, 7u);
  ASSERT_EQ(back.allocs.size(), 2u);
  EXPECT_EQ(back.allocs[1].alloc_id, 2u);
  EXPECT_EQ(back.allocs[1].gpu_uuid, "GPU-b");
  EXPECT_EQ(back.allocs[1].bytes, 8192u);
  EXPECT_TRUE(back.allocs[1].freed);
  ASSERT_EQ(back.usage.size(), 1u);
  ExpectSame(back.usage[0], Usage("GPU-a"));

  DirectiveAck a{.directive_id = 5, .complied = true, .usage = Usage("GPU-b")};
  v1::DirectiveAck pa;
  ToProto(a, &pa);
  const DirectiveAck ack = FromProto(ThroughWire(pa));
  EXPECT_EQ(ack.directive_id, 5u);
  EXPECT_TRUE(ack.complied);
  ASSERT_TRUE(ack.usage.has_value());
  ExpectSame(*ack.usage, Usage("GPU-b"));
  v1::DirectiveAck bare;
  ToProto(DirectiveAck{.directive_id = 6, .complied = false, .usage = std::nullopt}, &bare);
  EXPECT_FALSE(FromProto(ThroughWire(bare)).usage.has_value());
}

TEST(ProtocolConvertTest, DirectivesRoundTripEveryKind) {
  for (Directive::Kind kind : {Directive::Kind::kBudget, Directive::Kind::kEvict,
                               Directive::Kind::kDemote, Directive::Kind::kHostBudget}) {
    Directive d;
    d.id = 3;
    d.kind = kind;
    d.gpu_uuid = "GPU-a";
    d.budget_bytes = 11;
    d.bytes = 12;
    d.deadline = std::chrono::milliseconds(2000);
    v1::Directive p;
    ToProto(d, &p);
    const Directive back = FromProto(ThroughWire(p));
    EXPECT_EQ(back.id, 3u);
    EXPECT_EQ(back.kind, kind);
    EXPECT_EQ(back.gpu_uuid, "GPU-a");
    EXPECT_EQ(back.budget_bytes, 11u);
    EXPECT_EQ(back.bytes, 12u);
    EXPECT_EQ(back.deadline, std::chrono::milliseconds(2000));
  }
  v1::Directive unknown;
  unknown.set_kind(v1::Directive::KIND_UNSPECIFIED);
  EXPECT_EQ(FromProto(unknown).kind, Directive::Kind::kBudget);
}

TEST(ProtocolConvertTest, AnswersRoundTrip) {
  Registered r;
  r.client_id = 9;
  r.pid = 1234;
  r.protocol_version = kProtocolVersion;
  r.budgets.push_back({"GPU-a", 100, false});
  r.budgets.push_back({"GPU-b", 0, true});
  r.host_budget_bytes = 77;
  r.hint_interval_ms = 50;
  v1::Registered p;
  ToProto(r, &p);
  const Registered back = FromProto(ThroughWire(p));
  EXPECT_EQ(back.client_id, 9u);
  EXPECT_EQ(back.pid, 1234u);
  EXPECT_EQ(back.protocol_version, kProtocolVersion);
  ASSERT_EQ(back.budgets.size(), 2u);
  EXPECT_EQ(back.budgets[0].budget_bytes, 100u);
  EXPECT_FALSE(back.budgets[0].pending);
  EXPECT_TRUE(back.budgets[1].pending);
  EXPECT_EQ(back.host_budget_bytes, 77u);
  EXPECT_EQ(back.hint_interval_ms, 50u);

  GpusAdded a{.budgets = {{"GPU-c", 5, false}}, .error = "no"};
  v1::GpusAdded pa;
  ToProto(a, &pa);
  const GpusAdded added = FromProto(ThroughWire(pa));
  ASSERT_EQ(added.budgets.size(), 1u);
  EXPECT_EQ(added.budgets[0].gpu_uuid, "GPU-c");
  EXPECT_EQ(added.error, "no");
}

// HintBatch field 3 (access summaries) and ClientDetail field 4 (their count) were removed:
// bytes an older peer sends with them still parse, and the numbers stay reserved.
TEST(ProtocolConvertTest, RemovedFieldsAreReservedAndSkipped) {
  const google::protobuf::Descriptor* hints = v1::HintBatch::descriptor();
  EXPECT_EQ(hints->FindFieldByNumber(3), nullptr);
  EXPECT_TRUE(hints->IsReservedNumber(3));
  const google::protobuf::Descriptor* detail = v1::ClientDetail::descriptor();
  EXPECT_EQ(detail->FindFieldByNumber(4), nullptr);
  EXPECT_TRUE(detail->IsReservedNumber(4));

  // An old client's batch: iteration 1, one access summary {alloc_id 1, accesses 3} in field 3.
  const std::string old_bytes("\x08\x01\x1a\x04\x08\x01\x10\x03", 8);
  v1::HintBatch p;
  ASSERT_TRUE(p.ParseFromString(old_bytes));
  EXPECT_EQ(FromProto(p).iteration, 1u);
}

}  // namespace
}  // namespace memvirt::protocol

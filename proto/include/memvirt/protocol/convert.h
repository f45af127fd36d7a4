// Conversions between the memvirt.v1 client messages and their plain values
// (memvirt/protocol/messages.h), used by both ends: the client library and the daemon.
// Conversions copy fields verbatim; validation is the daemon core's job
// (daemon/core/node_state.h). An unknown Directive kind decodes as kBudget.
//
// Thread safety: pure functions.
#ifndef MEMVIRT_PROTOCOL_CONVERT_H_
#define MEMVIRT_PROTOCOL_CONVERT_H_

#include <vector>

#include "memvirt/protocol/messages.h"
#include "memvirt/v1/memvirt.pb.h"

namespace memvirt::protocol {

void ToProto(const GpuClaim& g, v1::GpuClaim* p);
void ToProto(const GpuUsage& u, v1::GpuUsage* p);
void ToProto(const Registration& r, v1::RegisterRequest* p);
void ToProto(const std::vector<GpuClaim>& gpus, v1::AddGpusRequest* p);
void ToProto(const HintBatch& b, v1::HintBatch* p);
void ToProto(const DirectiveAck& a, v1::DirectiveAck* p);
void ToProto(const Directive& d, v1::Directive* p);
void ToProto(const GpuBudget& b, v1::GpuBudget* p);
void ToProto(const Registered& r, v1::Registered* p);
void ToProto(const GpusAdded& a, v1::GpusAdded* p);

GpuClaim FromProto(const v1::GpuClaim& p);
GpuUsage FromProto(const v1::GpuUsage& p);
Registration FromProto(const v1::RegisterRequest& p);
std::vector<GpuClaim> FromProto(const v1::AddGpusRequest& p);
HintBatch FromProto(const v1::HintBatch& p);
DirectiveAck FromProto(const v1::DirectiveAck& p);
Directive FromProto(const v1::Directive& p);
GpuBudget FromProto(const v1::GpuBudget& p);
Registered FromProto(const v1::Registered& p);
GpusAdded FromProto(const v1::GpusAdded& p);

}  // namespace memvirt::protocol

#endif  // MEMVIRT_PROTOCOL_CONVERT_H_

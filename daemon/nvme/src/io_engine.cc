#include "memvirt/nvme/io_engine.h"

#include "absl/strings/str_cat.h"

namespace memvirt::nvme {

absl::Status IoEngine::ValidateRequest(const IoRequest& request) const {
  if (request.file_index < 0 || request.file_index >= file_count()) {
    return absl::InvalidArgumentError(
        absl::StrCat("file index ", request.file_index, " out of range [0, ", file_count(), ")"));
  }
  if (request.length == 0 || request.buffer == nullptr) {
    return absl::InvalidArgumentError("empty request");
  }
  const uint64_t size = file_size(request.file_index);
  if (request.offset > size || request.length > size - request.offset) {
    return absl::InvalidArgumentError(absl::StrCat("request [", request.offset, ", +",
                                                   request.length, ") beyond file size ", size));
  }
  if (direct_io()) {
    const auto addr = reinterpret_cast<uintptr_t>(request.buffer);
    if (addr % kDirectIoAlignment != 0 || request.offset % kDirectIoAlignment != 0 ||
        request.length % kDirectIoAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "direct I/O needs buffer, offset and length aligned to ", kDirectIoAlignment));
    }
  }
  return absl::OkStatus();
}

absl::Status IoEngine::ExecuteSync(const IoRequest& request) {
  if (outstanding() != 0) {
    return absl::FailedPreconditionError("synchronous I/O while requests are outstanding");
  }
  if (absl::Status s = Submit({&request, 1}); !s.ok()) return s;
  IoCompletion completion;
  while (true) {
    absl::StatusOr<size_t> n = Reap({&completion, 1}, absl::InfiniteDuration());
    if (!n.ok()) return n.status();
    if (*n == 1) return completion.status;
  }
}

absl::Status IoEngine::ReadSync(int file_index, uint64_t offset, void* buffer, size_t length) {
  return ExecuteSync({IoOp::kRead, file_index, offset, buffer, length, 0});
}

absl::Status IoEngine::WriteSync(int file_index, uint64_t offset, const void* buffer,
                                 size_t length) {
  // The engine never writes through the buffer of a write request.
  return ExecuteSync({IoOp::kWrite, file_index, offset, const_cast<void*>(buffer), length, 0});
}

}  // namespace memvirt::nvme

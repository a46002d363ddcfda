#include "launcher/training/rank_collectives.h"

#include <algorithm>
#include <string>

namespace sy::launcher {
namespace {

// Copies the flat spans into one buffer, or back (`to_spans`).
void Pack(std::span<const std::span<float>> spans, std::vector<float>& buffer, bool to_spans) {
  size_t total = 0;
  for (std::span<float> s : spans) total += s.size();
  if (!to_spans) buffer.resize(total);
  size_t at = 0;
  for (std::span<float> s : spans) {
    if (to_spans) {
      std::copy(buffer.begin() + static_cast<std::ptrdiff_t>(at),
                buffer.begin() + static_cast<std::ptrdiff_t>(at + s.size()), s.begin());
    } else {
      std::copy(s.begin(), s.end(), buffer.begin() + static_cast<std::ptrdiff_t>(at));
    }
    at += s.size();
  }
}

}  // namespace

Status BroadcastStatus(Communicator& comm, const Status& status, int root) {
  int64_t header[2] = {static_cast<int64_t>(status.code()),
                       static_cast<int64_t>(status.message().size())};
  SY_RETURN_IF_ERROR(comm.Broadcast<int64_t>(header, root));
  std::string message = comm.rank() == root ? status.message() : std::string();
  message.resize(static_cast<size_t>(header[1]));
  SY_RETURN_IF_ERROR(comm.Broadcast(message.data(), message.size(), DType::kU8, root));
  if (header[0] == static_cast<int64_t>(StatusCode::kOk)) return Status::Ok();
  return Status(static_cast<StatusCode>(header[0]), message);
}

namespace {

// AllReduceSpans with the caller's packing buffer.
Status AllReducePacked(Communicator& comm, std::span<const std::span<float>> spans,
                       std::vector<float>& packed) {
  if (comm.size() == 1 || spans.empty()) return Status::Ok();
  Pack(spans, packed, /*to_spans=*/false);
  SY_RETURN_IF_ERROR(comm.AllReduceInPlace<float>(packed, Reduction::kSum));
  Pack(spans, packed, /*to_spans=*/true);
  return Status::Ok();
}

}  // namespace

Status AllReduceSpans(Communicator& comm, std::span<const std::span<float>> spans) {
  std::vector<float> packed;
  return AllReducePacked(comm, spans, packed);
}

Status AllReduceEach(Communicator& comm, std::span<const std::vector<std::span<float>>> groups) {
  std::vector<float> packed;  // reused: every group of a step's experts has the same size
  for (const std::vector<std::span<float>>& group : groups) {
    SY_RETURN_IF_ERROR(AllReducePacked(comm, group, packed));
  }
  return Status::Ok();
}

}  // namespace sy::launcher

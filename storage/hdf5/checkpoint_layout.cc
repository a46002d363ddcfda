#include "storage/hdf5/checkpoint_layout.h"

namespace sy {

std::string ExpertTensorName(int layer, int global_expert, std::string_view weight) {
  return "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(global_expert) + "/" +
         std::string(weight);
}

std::string OptimizerStateName(std::string_view state, std::string_view name) {
  return "optim/" + std::string(state) + "/" + std::string(name);
}

Status ValidateTensorName(std::string_view name) {
  const auto bad = [&](std::string_view why) {
    return InvalidArgumentError("tensor name '" + std::string(name) + "' " + std::string(why));
  };
  if (name.empty()) return bad("is empty");
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return bad("contains a control character");
    }
  }
  if (name.front() == '/' || name.back() == '/') return bad("must not start or end with '/'");
  size_t begin = 0;
  bool first = true;
  while (begin <= name.size()) {
    size_t end = name.find('/', begin);
    if (end == std::string_view::npos) end = name.size();
    const std::string_view part = name.substr(begin, end - begin);
    if (part.empty()) return bad("has an empty part ('//')");
    if (part == "." || part == "..") return bad("has a '.' or '..' part");
    if (first && part == kCheckpointMetaGroup) {
      return bad("is under 'meta/', which holds checkpoint metadata");
    }
    first = false;
    begin = end + 1;
  }
  return Status::Ok();
}

Status ValidateMetadataKey(std::string_view key) {
  if (key.empty() || key.find('/') != std::string_view::npos || key == "." || key == "..") {
    return InvalidArgumentError("metadata key '" + std::string(key) +
                                "' must be one non-empty name without '/'");
  }
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return InvalidArgumentError("metadata key '" + std::string(key) +
                                  "' contains a control character");
    }
  }
  return Status::Ok();
}

}  // namespace sy

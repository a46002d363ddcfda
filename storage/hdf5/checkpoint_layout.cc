#include "storage/hdf5/checkpoint_layout.h"

#include <cstdio>
#include <limits>

namespace sy {

std::string ExpertTensorName(int layer, int global_expert, std::string_view weight) {
  return "experts/layer" + std::to_string(layer) + "/expert" + std::to_string(global_expert) + "/" +
         std::string(weight);
}

std::string OptimizerStateName(std::string_view state, std::string_view name) {
  return "optim/" + std::string(state) + "/" + std::string(name);
}

int ExpertOfTensorName(std::string_view name) {
  for (std::string_view state : {"optim/m/", "optim/v/", "optim/master/"}) {
    if (name.substr(0, state.size()) == state) {
      name.remove_prefix(state.size());
      break;
    }
  }
  constexpr std::string_view kExperts = "experts/layer";
  if (name.substr(0, kExperts.size()) != kExperts) return -1;
  const size_t slash = name.find('/', kExperts.size());
  constexpr std::string_view kExpert = "/expert";
  if (slash == std::string_view::npos || name.substr(slash, kExpert.size()) != kExpert) return -1;
  int64_t expert = 0;
  size_t i = slash + kExpert.size(), digits = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i, ++digits) {
    expert = expert * 10 + (name[i] - '0');
    if (expert > std::numeric_limits<int>::max()) return -1;
  }
  if (digits == 0 || i >= name.size() || name[i] != '/') return -1;
  return static_cast<int>(expert);
}

std::string CheckpointShardFileName(int index, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "shard-%05d-of-%05d.h5", index, count);
  return name;
}

bool ParseCheckpointShardFileName(std::string_view filename, int* index, int* count) {
  // shard-I-of-N.h5, I and N of at least 5 digits.
  auto number = [](std::string_view digits, int* out) {
    if (digits.size() < 5 || digits.size() > 9) return false;
    int value = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + (c - '0');
    }
    *out = value;
    return true;
  };
  constexpr std::string_view kPrefix = "shard-", kOf = "-of-", kSuffix = ".h5";
  if (filename.size() < kPrefix.size() + kSuffix.size() ||
      filename.substr(0, kPrefix.size()) != kPrefix ||
      filename.substr(filename.size() - kSuffix.size()) != kSuffix) {
    return false;
  }
  const std::string_view body =
      filename.substr(kPrefix.size(), filename.size() - kPrefix.size() - kSuffix.size());
  const size_t of = body.find(kOf);
  if (of == std::string_view::npos) return false;
  int i = 0, n = 0;
  if (!number(body.substr(0, of), &i) || !number(body.substr(of + kOf.size()), &n)) return false;
  if (n < 1 || i >= n) return false;
  *index = i;
  *count = n;
  return true;
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

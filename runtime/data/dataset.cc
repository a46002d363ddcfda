#include "runtime/data/dataset.h"

namespace sy {

std::string_view SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kEval:
      return "eval";
  }
  return "unknown";
}

Status Dataset::RestoreState(const nlohmann::json& state) {
  if (state.is_null()) return Status::Ok();
  return InvalidArgumentError("data position: dataset '" + name() +
                              "' keeps no state, but the saved position carries " +
                              state.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                              "; it was saved for a different dataset");
}

}  // namespace sy

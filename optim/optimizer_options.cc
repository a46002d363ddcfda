#include "optim/optimizer_options.h"

#include <cmath>
#include <string>

namespace sy {

std::string_view OptimizerKindName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW:
      return "adamw";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kSgd:
      return "sgd";
  }
  return "unknown";
}

Result<OptimizerKind> ParseOptimizerKind(std::string_view name) {
  for (OptimizerKind kind : {OptimizerKind::kAdamW, OptimizerKind::kAdam, OptimizerKind::kSgd}) {
    if (name == OptimizerKindName(kind)) return kind;
  }
  return InvalidArgumentError("optimizer.kind is \"" + std::string(name) +
                              "\"; expected one of \"adamw\", \"adam\", \"sgd\"");
}

namespace {

Status OutOfRange(std::string_view field, double value, std::string_view range) {
  return InvalidArgumentError("optimizer." + std::string(field) + " is " + std::to_string(value) +
                              "; it must be " + std::string(range));
}

}  // namespace

Status ValidateOptimizerOptions(const OptimizerOptions& options) {
  // Written as !(inside) so that NaN fails every check.
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0)) {
    return OutOfRange("beta1", options.beta1, "in [0, 1), e.g. 0.9");
  }
  if (!(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return OutOfRange("beta2", options.beta2, "in [0, 1), e.g. 0.999");
  }
  if (!(options.eps >= 0.0 && std::isfinite(options.eps))) {
    return OutOfRange("eps", options.eps, "finite and >= 0, e.g. 1e-8");
  }
  if (!(options.weight_decay >= 0.0 && std::isfinite(options.weight_decay))) {
    return OutOfRange("weight_decay", options.weight_decay, "finite and >= 0, e.g. 0.01");
  }
  if (!(options.momentum >= 0.0 && std::isfinite(options.momentum))) {
    return OutOfRange("momentum", options.momentum, "finite and >= 0, e.g. 0.9");
  }
  if (!(options.dampening >= 0.0 && options.dampening <= 1.0)) {
    return OutOfRange("dampening", options.dampening, "in [0, 1]");
  }
  if (options.nesterov && (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return InvalidArgumentError(
        "optimizer.nesterov is true with momentum " + std::to_string(options.momentum) +
        " and dampening " + std::to_string(options.dampening) +
        "; Nesterov momentum needs momentum > 0 and dampening = 0 (or set nesterov to false)");
  }
  if (options.chunk_elems < 1) {
    return InvalidArgumentError("optimizer.chunk_elems is " + std::to_string(options.chunk_elems) +
                                "; it must be >= 1 (default 65536)");
  }
  return Status::Ok();
}

}  // namespace sy

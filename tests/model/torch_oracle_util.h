// Helpers of the tests that run a PyTorch oracle script (tests/model/torch_oracle_test.cc,
// tests/train/torch_autocast_test.cc): whether Debian's python3-torch is there to run them, and
// a model config as the scripts read it.
// Thread-safety: pure functions (PythonTorchAvailable runs a process).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/model/model_config.h"

namespace sy::testing {

// The interpreter the oracle scripts run under.
inline constexpr const char* kOraclePython = "/usr/bin/python3";

// Whether kOraclePython imports torch; otherwise *why says what to install (for GTEST_SKIP).
bool PythonTorchAvailable(std::string* why);

// Every ModelConfig field an oracle reads, under the config.json names.
nlohmann::json ModelConfigJson(const ModelConfig& c);

}  // namespace sy::testing

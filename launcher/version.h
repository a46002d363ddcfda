// The text of `switchyard --version`: the version, the features compiled in, and the devices
// this machine offers. Thread-safety: pure.
#pragma once

#include <string>

namespace sy::launcher {

std::string VersionText();

}  // namespace sy::launcher

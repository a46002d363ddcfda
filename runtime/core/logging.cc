#include "runtime/core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <string>

namespace sy {

Status ConfigureLogging(std::string_view level) {
  std::string name(level);
  if (name.empty()) {
    const char* env = std::getenv("SY_LOG_LEVEL");
    name = env != nullptr && *env != '\0' ? env : "info";
  }
  spdlog::level::level_enum parsed;
  if (name == "trace") {
    parsed = spdlog::level::trace;
  } else if (name == "debug") {
    parsed = spdlog::level::debug;
  } else if (name == "info") {
    parsed = spdlog::level::info;
  } else if (name == "warning" || name == "warn") {
    parsed = spdlog::level::warn;
  } else if (name == "error") {
    parsed = spdlog::level::err;
  } else if (name == "off") {
    parsed = spdlog::level::off;
  } else {
    return InvalidArgumentError("log level '" + name +
                                "' (--log-level or SY_LOG_LEVEL): expected trace, debug, info, "
                                "warning, error or off");
  }
  std::shared_ptr<spdlog::logger> logger = spdlog::get("switchyard");
  if (logger == nullptr) logger = spdlog::stderr_color_mt("switchyard");
  logger->set_pattern("%^%l%$: %v");
  logger->set_level(parsed);
  spdlog::set_default_logger(std::move(logger));
  return Status::Ok();
}

}  // namespace sy

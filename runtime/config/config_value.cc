#include "runtime/config/config_value.h"

#include <cmath>

#include "runtime/config/config.h"

namespace sy::internal {

using nlohmann::json;

std::string ExpectedButGot(std::string_view expected, const json& value) {
  return "must be " + std::string(expected) + ", got " + DescribeJsonValue(value);
}

std::string FormatConfigNumber(double value) {
  if (value == std::trunc(value) && std::fabs(value) < 1e15) {
    return std::to_string(static_cast<int64_t>(value));
  }
  return json(value).dump();
}

std::optional<std::string> ReadConfigInteger(const json& value, int64_t lo, int64_t hi,
                                             int64_t* out) {
  const std::string range =
      "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (value.is_number_integer() && !value.is_number_unsigned()) {
    const int64_t v = value.get<int64_t>();
    if (v < lo || v > hi) return ExpectedButGot(range, value);
    *out = v;
    return std::nullopt;
  }
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (hi < 0 || v > static_cast<uint64_t>(hi)) return ExpectedButGot(range, value);
    if (lo > 0 && v < static_cast<uint64_t>(lo)) return ExpectedButGot(range, value);
    *out = static_cast<int64_t>(v);
    return std::nullopt;
  }
  if (value.is_number_float()) {
    const double v = value.get<double>();
    // 2^63 is exactly representable; anything at or past it overflows int64.
    if (v != std::trunc(v)) return ExpectedButGot("an integer", value);
    if (v < static_cast<double>(lo) || v >= 9223372036854775808.0 || static_cast<int64_t>(v) > hi) {
      return ExpectedButGot(range, value);
    }
    *out = static_cast<int64_t>(v);
    return std::nullopt;
  }
  return ExpectedButGot("an integer", value);
}

std::optional<std::string> ReadConfigUnsigned(const json& value, uint64_t hi, uint64_t* out) {
  const std::string range = "an integer in [0, " + std::to_string(hi) + "]";
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > hi) return ExpectedButGot(range, value);
    *out = v;
    return std::nullopt;
  }
  if (value.is_number_integer()) return ExpectedButGot(range, value);  // negative
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (v != std::trunc(v)) return ExpectedButGot("a non-negative integer", value);
    if (v < 0 || v >= 18446744073709551616.0 || static_cast<uint64_t>(v) > hi) {
      return ExpectedButGot(range, value);
    }
    *out = static_cast<uint64_t>(v);
    return std::nullopt;
  }
  return ExpectedButGot("a non-negative integer", value);
}

std::optional<std::string> ReadConfigFloat(const json& value, double limit, double* out) {
  if (!value.is_number()) return ExpectedButGot("a number", value);
  const double v = value.get<double>();
  if (!std::isfinite(v) || std::fabs(v) > limit) {
    return ExpectedButGot("a finite number of magnitude at most " + FormatConfigNumber(limit),
                          value);
  }
  *out = v;
  return std::nullopt;
}

}  // namespace sy::internal

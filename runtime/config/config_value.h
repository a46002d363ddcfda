// ConfigValueTraits<V>: how one C++ field type reads from and writes to JSON, for ConfigSchema.
//
// Supported: bool, int, int64_t, uint32_t, uint64_t, float, double, std::string, and
// std::vector of any of them. Integers accept JSON integers and integral floats (1e3) within the
// type's range; floating-point fields accept any JSON number within range; nothing converts from
// a string, except that a string field set by `--set key=123` takes the raw text "123" (see
// ConfigSchema).
//
// Read returns nullopt on success, or the tail of an error message that says what was expected and
// what was found: "must be an integer, got string \"eight\"". The caller prefixes the file and key.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace sy {

namespace internal {
// "must be <expected>, got <description of value>".
std::string ExpectedButGot(std::string_view expected, const nlohmann::json& value);
// 1024 for integral values, 0.001 or 1e-05 otherwise.
std::string FormatConfigNumber(double value);
std::optional<std::string> ReadConfigInteger(const nlohmann::json& value, int64_t lo, int64_t hi,
                                             int64_t* out);
std::optional<std::string> ReadConfigUnsigned(const nlohmann::json& value, uint64_t hi,
                                              uint64_t* out);
std::optional<std::string> ReadConfigFloat(const nlohmann::json& value, double limit, double* out);
}  // namespace internal

template <typename V>
struct ConfigValueTraits;  // unsupported field type: add a specialisation here

template <>
struct ConfigValueTraits<bool> {
  static constexpr bool kIsNumber = false;
  static std::string TypeName() { return "boolean"; }
  static std::optional<std::string> Read(const nlohmann::json& value, bool* out) {
    if (!value.is_boolean()) return internal::ExpectedButGot("true or false", value);
    *out = value.get<bool>();
    return std::nullopt;
  }
  static nlohmann::json Write(bool value) { return value; }
};

template <typename I>
requires(std::is_integral_v<I>&& std::is_signed_v<I>) struct ConfigValueTraits<I> {
  static constexpr bool kIsNumber = true;
  static std::string TypeName() { return "integer"; }
  static std::optional<std::string> Read(const nlohmann::json& value, I* out) {
    int64_t v = 0;
    if (auto error = internal::ReadConfigInteger(value, std::numeric_limits<I>::min(),
                                                 std::numeric_limits<I>::max(), &v)) {
      return error;
    }
    *out = static_cast<I>(v);
    return std::nullopt;
  }
  static nlohmann::json Write(I value) { return static_cast<int64_t>(value); }
};

template <typename U>
requires(std::is_integral_v<U>&& std::is_unsigned_v<U> &&
         !std::is_same_v<U, bool>) struct ConfigValueTraits<U> {
  static constexpr bool kIsNumber = true;
  static std::string TypeName() { return "non-negative integer"; }
  static std::optional<std::string> Read(const nlohmann::json& value, U* out) {
    uint64_t v = 0;
    if (auto error = internal::ReadConfigUnsigned(value, std::numeric_limits<U>::max(), &v)) {
      return error;
    }
    *out = static_cast<U>(v);
    return std::nullopt;
  }
  static nlohmann::json Write(U value) { return static_cast<uint64_t>(value); }
};

template <typename F>
requires std::is_floating_point_v<F>
struct ConfigValueTraits<F> {
  static constexpr bool kIsNumber = true;
  static std::string TypeName() { return "number"; }
  static std::optional<std::string> Read(const nlohmann::json& value, F* out) {
    double v = 0;
    if (auto error = internal::ReadConfigFloat(
            value, static_cast<double>(std::numeric_limits<F>::max()), &v)) {
      return error;
    }
    *out = static_cast<F>(v);
    return std::nullopt;
  }
  static nlohmann::json Write(F value) { return static_cast<double>(value); }
};

template <>
struct ConfigValueTraits<std::string> {
  static constexpr bool kIsNumber = false;
  static std::string TypeName() { return "string"; }
  static std::optional<std::string> Read(const nlohmann::json& value, std::string* out) {
    if (!value.is_string()) return internal::ExpectedButGot("a string", value);
    *out = value.get<std::string>();
    return std::nullopt;
  }
  static nlohmann::json Write(const std::string& value) { return value; }
};

template <typename E>
struct ConfigValueTraits<std::vector<E>> {
  static constexpr bool kIsNumber = false;
  static std::string TypeName() { return "array of " + ConfigValueTraits<E>::TypeName(); }
  static std::optional<std::string> Read(const nlohmann::json& value, std::vector<E>* out) {
    if (!value.is_array()) {
      return internal::ExpectedButGot("an array of " + ConfigValueTraits<E>::TypeName(), value);
    }
    std::vector<E> result(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
      E element{};
      if (auto error = ConfigValueTraits<E>::Read(value[i], &element)) {
        return "has element [" + std::to_string(i) + "] that " + *error;
      }
      result[i] = std::move(element);
    }
    *out = std::move(result);
    return std::nullopt;
  }
  static nlohmann::json Write(const std::vector<E>& value) {
    nlohmann::json array = nlohmann::json::array();
    for (const E& element : value) array.push_back(ConfigValueTraits<E>::Write(element));
    return array;
  }
};

}  // namespace sy

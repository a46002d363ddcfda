// Status and Result<T>: how I/O, file formats, configs and user input report failure.
//
// A Status is either OK or carries a code and a message that tells the user what went wrong and
// what to do about it ("file X: field Y is Z; expected W"). Broken internal invariants do not use
// Status: they use SY_CHECK (runtime/core/check.h), which aborts.
//
// Ownership: Status and Result own their message and value; both are cheap to move.
// Thread-safety: values; no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sy {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed (config value, shape, flag)
  kNotFound,            // a file, key or tensor does not exist
  kAlreadyExists,       // creating something that is already there
  kIOError,             // the operating system failed an I/O call
  kDataLoss,            // stored data is corrupt or truncated (bad checksum, torn write)
  kResourceExhausted,   // out of memory, disk, slots
  kUnavailable,         // a feature or device is not present in this build or on this machine
  kFailedPrecondition,  // the system is not in a state where the call can run
  kDeadlineExceeded,    // a wait ran past its timeout
  kUnimplemented,       // a valid request this build does not support
  kInternal,            // a bug surfaced as an error where aborting would lose user data
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;

  // "IOError: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(std::string_view context) const;

  // Explicitly discards a Status whose failure is acceptable at the call site.
  void IgnoreError() const {}

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;  // null means OK; shared so copies are cheap
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status IOError(std::string message);
Status DataLossError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status FailedPreconditionError(std::string message);
Status DeadlineExceededError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);

// IOError naming the file and the errno text: "open /x/y: No such file or directory".
Status ErrnoError(std::string_view what, std::string_view path, int err);

// Result<T> holds either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  // An OK Status carries no value, so it becomes an Internal error.
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : status_(status.ok() ? InternalError("Result constructed from an OK Status")
                            : std::move(status)) {}

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // Accessors abort when there is no value: check ok() first, or use SY_ASSIGN_OR_RETURN.
  T& value() & {
    CheckHasValue();
    return *value_;
  }
  const T& value() const& {
    CheckHasValue();
    return *value_;
  }
  T&& value() && {
    CheckHasValue();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckHasValue() const;

  std::optional<T> value_;
  Status status_;
};

namespace internal {
[[noreturn]] void DieOnBadResultAccess(const Status& status);
}  // namespace internal

template <typename T>
void Result<T>::CheckHasValue() const {
  if (!value_.has_value()) internal::DieOnBadResultAccess(status_);
}

}  // namespace sy

#define SY_STATUS_CONCAT_INNER(a, b) a##b
#define SY_STATUS_CONCAT(a, b) SY_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define SY_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::sy::Status sy_status_tmp_ = (expr);            \
    if (!sy_status_tmp_.ok()) return sy_status_tmp_; \
  } while (0)

// `SY_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from the Result's value, or returns its
// Status.
#define SY_ASSIGN_OR_RETURN(lhs, expr) \
  SY_ASSIGN_OR_RETURN_IMPL(SY_STATUS_CONCAT(sy_result_, __LINE__), lhs, expr)
#define SY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

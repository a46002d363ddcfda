// A failed Status as a Python exception carrying its message: InvalidArgument as ValueError,
// NotFound as FileNotFoundError, every other code as switchyard.Error (a RuntimeError; its `code`
// attribute names the StatusCode, "DataLoss" for instance).
//
// Thread-safety: RegisterStatusExceptions once, at import; the others with the interpreter's lock
// held (they raise).
#pragma once

#include <nanobind/nanobind.h>

#include <utility>

#include "runtime/core/status.h"

namespace sy::python {

// A failed Status on its way to Python: thrown by ThrowIfError, turned into the exception by the
// translator RegisterStatusExceptions installs.
class StatusException : public std::exception {
 public:
  explicit StatusException(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return status_.message().c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Creates switchyard.Error in `module` and installs the translator.
void RegisterStatusExceptions(nanobind::module_& module);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusException(status);
}

template <typename T>
T Unwrap(Result<T>&& result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

}  // namespace sy::python

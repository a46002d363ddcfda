#include "python/src/status_exception.h"

#include <string>

namespace sy::python {
namespace {

PyObject* g_error = nullptr;  // switchyard.Error, owned by the module once added to it

}  // namespace

void RegisterStatusExceptions(nanobind::module_& module) {
  g_error = PyErr_NewExceptionWithDoc(
      "switchyard.Error",
      "A Switchyard operation failed; the message says what and how to go on, and `code` names "
      "the kind of failure (IOError, DataLoss, ResourceExhausted, ...).",
      PyExc_RuntimeError, nullptr);
  module.attr("Error") = nanobind::borrow(g_error);
  nanobind::register_exception_translator([](const std::exception_ptr& thrown, void*) {
    try {
      std::rethrow_exception(thrown);
    } catch (const StatusException& e) {
      const Status& status = e.status();
      PyObject* type = g_error;
      if (status.code() == StatusCode::kInvalidArgument) type = PyExc_ValueError;
      if (status.code() == StatusCode::kNotFound) type = PyExc_FileNotFoundError;
      const std::string message = status.message();
      PyObject* text =
          PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
      if (text == nullptr) return;  // the call's own error stands
      PyObject* value = PyObject_CallOneArg(type, text);
      Py_DECREF(text);
      if (value == nullptr) return;
      const std::string code(StatusCodeName(status.code()));
      PyObject* code_text =
          PyUnicode_FromStringAndSize(code.data(), static_cast<Py_ssize_t>(code.size()));
      if (code_text != nullptr) {
        PyObject_SetAttrString(value, "code", code_text);
        Py_DECREF(code_text);
      }
      PyErr_SetObject(type, value);
      Py_DECREF(value);
    }
  });
}

}  // namespace sy::python

// SY_CHECK: broken invariants abort the process with file:line and a message.
//
//   SY_CHECK(n <= capacity_) << "slot index " << n << " past capacity " << capacity_;
//   SY_CHECK_EQ(a.numel(), b.numel());
//
// The failure handler is process-wide. By default it prints and calls std::abort(); the parallel
// layer installs one that calls MPI_Abort, so a failed check ends the whole job instead of leaving
// the other ranks hung in a collective. Library code never calls exit().
//
// Thread-safety: checks may fail on any thread; SetFatalHandler must be called before threads that
// can fail a check start (typically once, in main or in the MPI environment setup).
#pragma once

#include <sstream>
#include <string>

namespace sy {

// Called with the full failure text ("file:line: check failed: cond: message"). Must not return.
using FatalHandler = void (*)(const std::string& text);

// Installs `handler`, returns the previous one. nullptr restores the default (print + abort).
FatalHandler SetFatalHandler(FatalHandler handler);

namespace internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `SY_CHECK(c) << x;` parse as a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace sy

#define SY_CHECK(condition)                 \
  (condition) ? (void)0                     \
              : ::sy::internal::Voidify() & \
                    ::sy::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define SY_CHECK_OP_IMPL(a, b, op) SY_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define SY_CHECK_EQ(a, b) SY_CHECK_OP_IMPL(a, b, ==)
#define SY_CHECK_NE(a, b) SY_CHECK_OP_IMPL(a, b, !=)
#define SY_CHECK_LT(a, b) SY_CHECK_OP_IMPL(a, b, <)
#define SY_CHECK_LE(a, b) SY_CHECK_OP_IMPL(a, b, <=)
#define SY_CHECK_GT(a, b) SY_CHECK_OP_IMPL(a, b, >)
#define SY_CHECK_GE(a, b) SY_CHECK_OP_IMPL(a, b, >=)

// Aborts when a Status-returning call fails where failure is a bug.
#define SY_CHECK_OK(expr)                                   \
  do {                                                      \
    ::sy::Status sy_check_ok_ = (expr);                     \
    SY_CHECK(sy_check_ok_.ok()) << sy_check_ok_.ToString(); \
  } while (0)

// FunctionRef<R(Args...)>: a reference to a callable that does not own it, as C++26's
// std::function_ref and LLVM's function_ref: two pointers, copied by value, and never an
// allocation. std::function copies its callable and puts any lambda that captures more than two
// pointers on the heap; a decode step passes about a hundred such lambdas to
// ThreadPool::ParallelFor.
//
// Ownership: none. The callable must outlive every call through the reference, so take one as a
// parameter of a function that calls it before it returns, and never keep it past that.
// Thread-safety: as the callable's own operator().
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace sy {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  // Implicit, so that a lambda passes where a FunctionRef is taken.
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& callable) {  // NOLINT(google-explicit-constructor)
    using Target = std::remove_reference_t<F>;
    if constexpr (std::is_function_v<Target>) {
      target_.function = reinterpret_cast<void (*)()>(&callable);
      call_ = &CallFunction<Target*>;
    } else {
      target_.object = const_cast<void*>(static_cast<const void*>(std::addressof(callable)));
      call_ = &CallObject<Target>;
    }
  }

  R operator()(Args... args) const { return call_(target_, std::forward<Args>(args)...); }

 private:
  // A function's address may not be held in a void*.
  union Target {
    void* object;
    void (*function)();
  };

  // std::invoke_r (C++23): a void FunctionRef drops what the callable returns.
  template <typename Callable>
  static R Invoke(Callable&& callable, Args... args) {
    if constexpr (std::is_void_v<R>) {
      std::invoke(std::forward<Callable>(callable), std::forward<Args>(args)...);
    } else {
      return std::invoke(std::forward<Callable>(callable), std::forward<Args>(args)...);
    }
  }
  template <typename F>
  static R CallObject(Target target, Args... args) {
    return Invoke(*static_cast<F*>(target.object), std::forward<Args>(args)...);
  }
  template <typename FunctionPointer>
  static R CallFunction(Target target, Args... args) {
    return Invoke(reinterpret_cast<FunctionPointer>(target.function), std::forward<Args>(args)...);
  }

  Target target_;
  R (*call_)(Target, Args...);
};

}  // namespace sy

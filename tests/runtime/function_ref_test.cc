// FunctionRef: calls through to the referenced callable (lambdas, functors, free functions), passes
// arguments and results on (a void one drops the result), and never copies what it references.
#include "runtime/core/function_ref.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

namespace sy {
namespace {

int Twice(int x) { return 2 * x; }

int CallWith(FunctionRef<int(int)> fn, int x) { return fn(x); }

TEST(FunctionRef, CallsLambdasFunctorsAndFunctions) {
  const std::string a = "captured", b = "by value", c = "and more";
  auto big_lambda = [a, b, c](int x) {
    return x + static_cast<int>(a.size() + b.size() + c.size());
  };
  EXPECT_EQ(CallWith(big_lambda, 1), 1 + 8 + 8 + 8);
  EXPECT_EQ(CallWith([](int x) { return x * x; }, 7), 49);
  EXPECT_EQ(CallWith(Twice, 21), 42);
  EXPECT_EQ(CallWith(&Twice, 5), 10);
}

TEST(FunctionRef, ReferencesTheCallableItself) {
  struct Counter {
    int calls = 0;
    int operator()(int x) { return x + ++calls; }
  } counter;
  EXPECT_EQ(CallWith(counter, 10), 11);
  EXPECT_EQ(CallWith(counter, 10), 12);
  EXPECT_EQ(counter.calls, 2);  // a copy would have left this one at 0
}

TEST(FunctionRef, ForwardsMoveOnlyArgumentsAndReferences) {
  auto take = [](std::unique_ptr<int> p, int& out) { out = *p; };
  FunctionRef<void(std::unique_ptr<int>, int&)> ref(take);
  int out = 0;
  ref(std::make_unique<int>(17), out);
  EXPECT_EQ(out, 17);
}

TEST(FunctionRef, AVoidReferenceDropsTheResult) {
  int calls = 0;
  auto counted = [&calls](int x) { return x + ++calls; };
  FunctionRef<void(int)> ref(counted);
  ref(1);
  ref(2);
  EXPECT_EQ(calls, 2);
}

TEST(FunctionRef, IsTwoPointers) { EXPECT_EQ(sizeof(FunctionRef<void()>), 2 * sizeof(void*)); }

}  // namespace
}  // namespace sy

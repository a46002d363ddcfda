// Status, Result, SY_RETURN_IF_ERROR / SY_ASSIGN_OR_RETURN and ErrnoError.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "runtime/core/status.h"

namespace sy {
namespace {

TEST(Status, OkAndErrors) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.code(), StatusCode::kOk);
  EXPECT_EQ(ok.ToString(), "OK");
  EXPECT_TRUE(ok.message().empty());

  Status err = NotFoundError("file x: missing");
  EXPECT_FALSE(err.ok());
  EXPECT_EQ(err.code(), StatusCode::kNotFound);
  EXPECT_EQ(err.ToString(), "NotFound: file x: missing");
  Status copy = err;
  EXPECT_EQ(copy.message(), "file x: missing");
  EXPECT_EQ(err.WithContext("loading").message(), "loading: file x: missing");
  EXPECT_TRUE(ok.WithContext("loading").ok());
  EXPECT_TRUE(Status(StatusCode::kOk, "ignored").ok());
}

TEST(Status, FactoriesSetTheirCodes) {
  EXPECT_EQ(InvalidArgumentError("").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AlreadyExistsError("").code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(IOError("").code(), StatusCode::kIOError);
  EXPECT_EQ(DataLossError("").code(), StatusCode::kDataLoss);
  EXPECT_EQ(ResourceExhaustedError("").code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(UnavailableError("").code(), StatusCode::kUnavailable);
  EXPECT_EQ(FailedPreconditionError("").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(DeadlineExceededError("").code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(UnimplementedError("").code(), StatusCode::kUnimplemented);
  EXPECT_EQ(InternalError("").code(), StatusCode::kInternal);
  EXPECT_EQ(StatusCodeName(StatusCode::kDataLoss), "DataLoss");
}

TEST(Status, ErrnoErrorMapsCodes) {
  Status not_found = ErrnoError("open", "/no/such", ENOENT);
  EXPECT_EQ(not_found.code(), StatusCode::kNotFound);
  EXPECT_EQ(not_found.message(), std::string("open /no/such: ") + std::strerror(ENOENT));
  EXPECT_EQ(ErrnoError("write", "/f", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoError("mmap", "/f", ENOMEM).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoError("write", "/f", EDQUOT).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoError("open", "/f", EEXIST).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoError("read", "/f", EIO).code(), StatusCode::kIOError);
  EXPECT_EQ(ErrnoError("open", "/f", EACCES).code(), StatusCode::kIOError);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Status CheckEven(int x) { return x % 2 == 0 ? Status::Ok() : InvalidArgumentError("odd"); }

Result<int> Quarter(int x) {
  SY_ASSIGN_OR_RETURN(int half, Half(x));
  SY_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

Status BothEven(int a, int b, int* calls) {
  ++*calls;
  SY_RETURN_IF_ERROR(CheckEven(a));
  ++*calls;
  SY_RETURN_IF_ERROR(CheckEven(b));
  ++*calls;
  return Status::Ok();
}

TEST(Result, HoldsValueOrStatus) {
  Result<int> good = Half(8);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  EXPECT_TRUE(good.status().ok());
  Result<int> bad = Half(3);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "3 is odd");

  Result<std::unique_ptr<int>> moved(std::make_unique<int>(7));
  std::unique_ptr<int> p = std::move(moved).value();
  EXPECT_EQ(*p, 7);

  Result<int> from_ok{Status::Ok()};
  EXPECT_FALSE(from_ok.ok());
  EXPECT_EQ(from_ok.status().code(), StatusCode::kInternal);
}

TEST(Result, Macros) {
  EXPECT_EQ(*Quarter(12), 3);
  EXPECT_EQ(Quarter(6).status().message(), "3 is odd");
  EXPECT_EQ(Quarter(5).status().message(), "5 is odd");
  int calls = 0;
  EXPECT_TRUE(BothEven(2, 4, &calls).ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_FALSE(BothEven(1, 4, &calls).ok());
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_FALSE(BothEven(2, 3, &calls).ok());
  EXPECT_EQ(calls, 2);
}

TEST(ResultDeathTest, ValueOfAnErrorAborts) {
  testing::FLAGS_gtest_death_test_style = "threadsafe";
  Result<int> bad = Half(3);
  EXPECT_DEATH((void)bad.value(), "3 is odd");
}

}  // namespace
}  // namespace sy

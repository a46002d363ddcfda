// BackendParamTest: a test fixture over a backend named by the test's parameter ("cpu", "sim",
// "cuda:0"), created in SetUp; a cuda case is skipped where there is no GPU. With
// BackendParamName, for INSTANTIATE_TEST_SUITE_P.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/backend/backend.h"

namespace sy::testing {

class BackendParamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Result<Device> device = ParseDevice(GetParam());
    ASSERT_TRUE(device.ok());
    Result<std::unique_ptr<Backend>> backend = CreateBackend(*device);
    if (!backend.ok() && device->type == DeviceType::kCuda) GTEST_SKIP() << "no GPU here";
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(backend).value();
  }
  std::unique_ptr<Backend> backend_;
};

// "cuda:0" -> "cuda"; the others as they are.
inline std::string BackendParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "cuda:0" ? std::string("cuda") : info.param;
}

}  // namespace sy::testing

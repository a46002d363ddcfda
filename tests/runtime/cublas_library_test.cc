// cuBLAS is loaded when the first CUDA backend is made, not at program start
// (runtime/cuda/cublas_library.h): a process that only uses the CPU never maps it, and loading it
// resolves every entry point the backend calls. Runs without a GPU (the library loads anyway).
// ctest runs each case in its own process, so the first case sees a process that has not loaded it.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "runtime/backend/backend.h"
#include "runtime/cuda/cublas_library.h"

namespace sy {
namespace {

bool CublasIsMapped() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find("libcublas") != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLibrary, NotLoadedByAProcessThatOnlyUsesTheCpu) {
  EXPECT_FALSE(CublasIsMapped());
  Result<std::unique_ptr<Backend>> cpu = CreateBackend(Device::Cpu());
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_FALSE(CublasIsMapped());
}

TEST(CublasLibrary, LoadsEveryEntryPointOnFirstUse) {
  Result<const CublasLibrary*> loaded = LoadCublas();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const CublasLibrary& cublas = **loaded;
  EXPECT_NE(cublas.create, nullptr);
  EXPECT_NE(cublas.destroy, nullptr);
  EXPECT_NE(cublas.set_stream, nullptr);
  EXPECT_NE(cublas.set_workspace, nullptr);
  EXPECT_NE(cublas.set_math_mode, nullptr);
  EXPECT_NE(cublas.gemm_ex, nullptr);
  EXPECT_NE(cublas.gemm_strided_batched_ex, nullptr);
  EXPECT_NE(cublas.status_string, nullptr);
  EXPECT_TRUE(CublasIsMapped());
  // The same table on every call.
  EXPECT_EQ(*LoadCublas(), &cublas);
  // cuBLAS's own text for a status now.
  EXPECT_EQ(std::string(CublasStatusString(CUBLAS_STATUS_SUCCESS)),
            std::string(cublas.status_string(CUBLAS_STATUS_SUCCESS)));
  EXPECT_NE(std::string(CublasStatusString(CUBLAS_STATUS_SUCCESS)), "(cuBLAS not loaded)");
}

}  // namespace
}  // namespace sy

#include "runtime/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#ifndef SY_CUBLAS_LIBRARY
#error "SY_CUBLAS_LIBRARY (the cuBLAS soname) is set by runtime/cuda/cuda.cmake"
#endif

namespace sy {
namespace {

// The spelled-out GEMM types match an overload the header declares (unevaluated: no reference to
// the symbols, so nothing links against libcublas).
static_assert(std::is_same_v<decltype(static_cast<CublasGemmEx>(&::cublasGemmEx)), CublasGemmEx>);
static_assert(
    std::is_same_v<decltype(static_cast<CublasGemmStridedBatchedEx>(&::cublasGemmStridedBatchedEx)),
                   CublasGemmStridedBatchedEx>);

// The exported symbol behind each entry point (cublas_v2.h maps cublasCreate to cublasCreate_v2,
// and so on).
template <typename Fn>
void Resolve(void* library, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + symbol;
}

struct Loaded {
  CublasLibrary table;
  Status status;
};

Loaded Load() {
  Loaded loaded;
  void* library = dlopen(SY_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    loaded.status = FailedPreconditionError(
        std::string("the CUDA backend needs cuBLAS, and ") + SY_CUBLAS_LIBRARY +
        " could not be loaded: " + (reason != nullptr ? reason : "unknown reason") +
        "; install the CUDA toolkit's cuBLAS (the version this build was compiled against), or add "
        "its library directory to LD_LIBRARY_PATH");
    return loaded;
  }
  CublasLibrary& t = loaded.table;
  std::string missing;
  Resolve(library, "cublasCreate_v2", &t.create, &missing);
  Resolve(library, "cublasDestroy_v2", &t.destroy, &missing);
  Resolve(library, "cublasSetStream_v2", &t.set_stream, &missing);
  Resolve(library, "cublasSetWorkspace_v2", &t.set_workspace, &missing);
  Resolve(library, "cublasSetMathMode", &t.set_math_mode, &missing);
  Resolve(library, "cublasGemmEx", &t.gemm_ex, &missing);
  Resolve(library, "cublasGemmStridedBatchedEx", &t.gemm_strided_batched_ex, &missing);
  Resolve(library, "cublasGetStatusString", &t.status_string, &missing);
  if (!missing.empty()) {
    loaded.status = FailedPreconditionError(std::string(SY_CUBLAS_LIBRARY) + " lacks " + missing +
                                            ": it is not the cuBLAS this build was compiled "
                                            "against; install that version, or rebuild");
  }
  return loaded;
}

const Loaded& Library() {
  static const Loaded loaded = Load();
  return loaded;
}

}  // namespace

Result<const CublasLibrary*> LoadCublas() {
  const Loaded& loaded = Library();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.table;
}

const char* CublasStatusString(cublasStatus_t status) {
  const Loaded& loaded = Library();
  return loaded.table.status_string != nullptr ? loaded.table.status_string(status)
                                               : "(cuBLAS not loaded)";
}

}  // namespace sy

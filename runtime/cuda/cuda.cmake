# The CUDA backend: added to sy_runtime when SY_ENABLE_CUDA is on (runtime/CMakeLists.txt includes
# this file). Host code (.cc) compiles as C++ against the CUDA headers; kernels (.cu) with nvcc for
# CMAKE_CUDA_ARCHITECTURES (default 80;90, cmake/SyDependencies.cmake).

target_sources(sy_runtime PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cublas_library.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_handles.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_releasable_memory.cc
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/index.cu
  ${CMAKE_CURRENT_LIST_DIR}/norm_rope.cu
  ${CMAKE_CURRENT_LIST_DIR}/reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/topk.cu
)

# PRIVATE keeps the CUDA include directories away from consumers (no public header includes a CUDA
# header). sy_runtime is a static library, so CMake still carries cudart onto every consumer's link
# line ($<LINK_ONLY:...>). cuBLAS is not linked: runtime/cuda/cublas_library.h loads it with dlopen
# when the first CUDA backend is made (its soname follows the toolkit's major version), so a
# process that never makes one does not pay for cuBLASLt's initializers; only its headers (in the
# toolkit's include directory, which CUDA::cudart brings) are used.
target_link_libraries(sy_runtime PRIVATE CUDA::cudart ${CMAKE_DL_LIBS})
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/cublas_library.cc PROPERTIES
  COMPILE_DEFINITIONS "SY_CUBLAS_LIBRARY=\"libcublas.so.${CUDAToolkit_VERSION_MAJOR}\"")

target_compile_options(sy_runtime PRIVATE
  # Host-side warnings as errors (cmake/SyCompileOptions.cmake).
  ${SY_CUDA_WARNINGS}
  # nvcc's and the device front end's own warnings as errors.
  "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>"
  # Line info for profilers (no effect on code generation).
  "$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>"
)

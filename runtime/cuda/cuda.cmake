# The CUDA backend: added to sy_runtime when SY_ENABLE_CUDA is on (runtime/CMakeLists.txt includes
# this file). Host code (.cc) compiles as C++ against the CUDA headers; kernels (.cu) with nvcc for
# CMAKE_CUDA_ARCHITECTURES (default 80;90, cmake/SyDependencies.cmake).

# CMake before 3.26 knows no nvcc flag for C++20 and refuses CUDA_STANDARD 20
# (cmake/SyDependencies.cmake sets CMAKE_CUDA_STANDARD 20); nvcc >= 12 takes -std=c++20. Setting the
# flag here covers sy_runtime's kernels; cmake/SyDependencies.cmake is the place to set it for every
# CUDA target.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

target_sources(sy_runtime PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_gemm.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_handles.cc
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ops.cc
  ${CMAKE_CURRENT_LIST_DIR}/attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/index.cu
  ${CMAKE_CURRENT_LIST_DIR}/norm_rope.cu
  ${CMAKE_CURRENT_LIST_DIR}/reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/topk.cu
)

# PRIVATE keeps the CUDA include directories away from consumers (no public header includes a CUDA
# header). sy_runtime is a static library, so CMake still carries cudart and cuBLAS onto every
# consumer's link line ($<LINK_ONLY:...>).
target_link_libraries(sy_runtime PRIVATE CUDA::cudart CUDA::cublas)

target_compile_options(sy_runtime PRIVATE
  # Host-side warnings as errors, the same set as the C++ sources (SY_CXX_WARNINGS).
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>"
  # nvcc's and the device front end's own warnings as errors.
  "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>"
  # Line info for profilers (no effect on code generation).
  "$<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>"
)

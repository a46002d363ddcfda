# Every third-party dependency comes in here, as an imported target. Optional features set
# SY_HAVE_<FEATURE> to ON only when both the option is on and the library is found; a missing
# optional library is reported, never silently assumed.

find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
# libpng (Debian's libpng-dev) for the PNGs of `switchyard plot` (runtime/plot/).
find_package(PNG REQUIRED)

# OpenBLAS: Debian ships a pkg-config file; the cblas symbols live in libopenblas itself.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(sy::openblas ALIAS PkgConfig::OPENBLAS)

find_package(MPI COMPONENTS C)
set(SY_HAVE_MPI ${MPI_C_FOUND})

set(SY_HAVE_IO_URING OFF)
if(SY_ENABLE_IO_URING)
  pkg_check_modules(LIBURING IMPORTED_TARGET liburing)
  if(LIBURING_FOUND)
    set(SY_HAVE_IO_URING ON)
  else()
    message(WARNING "SY_ENABLE_IO_URING is on but liburing was not found: run scripts/install-deps.sh")
  endif()
endif()

set(SY_HAVE_PMEM OFF)
if(SY_ENABLE_PMEM)
  pkg_check_modules(LIBPMEM2 IMPORTED_TARGET libpmem2)
  if(LIBPMEM2_FOUND)
    set(SY_HAVE_PMEM ON)
  else()
    message(WARNING "SY_ENABLE_PMEM is on but libpmem2 was not found: run scripts/install-deps.sh")
  endif()
endif()

set(SY_HAVE_HDF5 OFF)
if(SY_ENABLE_HDF5)
  find_package(HDF5 COMPONENTS C)
  if(HDF5_FOUND)
    set(SY_HAVE_HDF5 ON)
  else()
    message(WARNING "SY_ENABLE_HDF5 is on but HDF5 was not found: run scripts/install-deps.sh")
  endif()
endif()

pkg_check_modules(XXHASH IMPORTED_TARGET libxxhash)
pkg_check_modules(SENTENCEPIECE IMPORTED_TARGET sentencepiece)
# ICU's character classes and NFC for the tokenizer.json pre-tokenizer (inference/).
pkg_check_modules(ICU_UC IMPORTED_TARGET icu-uc)
# libmicrohttpd (Debian's libmicrohttpd-dev) for `switchyard serve` (launcher/serving/).
pkg_check_modules(MICROHTTPD IMPORTED_TARGET libmicrohttpd)
if(NOT MICROHTTPD_FOUND)
  message(WARNING "libmicrohttpd not found: `switchyard serve` is off; run scripts/install-deps.sh")
endif()

set(SY_HAVE_NCCL OFF)
if(SY_ENABLE_CUDA)
  # Ampere and Hopper unless the user chose (-DCMAKE_CUDA_ARCHITECTURES=...). Set before
  # enable_language, which otherwise caches nvcc's own default (sm_75 for CUDA 13).
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90 CACHE STRING "CUDA architectures to build for")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # CMake before 3.26 knows no nvcc flag for C++20 and refuses CUDA_STANDARD 20; nvcc >= 12 takes
  # -std=c++20. Set here, at the top scope, so it covers every CUDA target.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND
     CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  if(SY_ENABLE_NCCL)
    find_package(NCCL)
    if(NCCL_FOUND)
      set(SY_HAVE_NCCL ON)
    else()
      message(WARNING "SY_ENABLE_NCCL is on but NCCL was not found")
    endif()
  endif()
endif()

if(SY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(SY_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# Compiler flags shared by every Switchyard target, and the helper that declares a layer library.

if(SY_SANITIZE_THREAD AND (SY_SANITIZE_ADDRESS))
  message(FATAL_ERROR "SY_SANITIZE_THREAD cannot be combined with SY_SANITIZE_ADDRESS")
endif()

set(SY_CXX_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)
# GCC 12 at -O3 reports string concatenation ("(" + std::to_string(n)) as an overlapping memcpy
# (-Wrestrict false positive, GCC bug 105651, fixed in GCC 13); a Release build would fail on it.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND SY_CXX_WARNINGS -Wno-restrict)
endif()
# The same host-side set for .cu files, passed through nvcc.
set(SY_CUDA_WARNINGS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror,-Wno-unused-parameter>")
set(SY_SANITIZER_FLAGS "")
if(SY_SANITIZE_ADDRESS)
  list(APPEND SY_SANITIZER_FLAGS -fsanitize=address -fno-omit-frame-pointer)
endif()
if(SY_SANITIZE_UNDEFINED)
  list(APPEND SY_SANITIZER_FLAGS -fsanitize=undefined -fno-sanitize-recover=undefined)
endif()
if(SY_SANITIZE_THREAD)
  list(APPEND SY_SANITIZER_FLAGS -fsanitize=thread)
endif()
if(SY_SANITIZER_FLAGS)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${SY_SANITIZER_FLAGS}>")
  add_link_options(${SY_SANITIZER_FLAGS})
endif()

if(SY_NATIVE)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-march=native>")
endif()

# sy_target_defaults(target): C++20, warnings as errors, include root at the repository top.
function(sy_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${SY_CXX_WARNINGS}>")
endfunction()

# sy_add_layer(name SOURCES ... DEPS ...): one library per top-level folder, aliased sy::name in
# the build and installed as Switchyard::name (cmake/SyInstall.cmake installs every layer listed in
# the global property SY_LAYER_TARGETS). Headers are included from the repository root in the
# build, from include/switchyard in an installed tree.
function(sy_add_layer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(sy_${name} STATIC ${ARG_SOURCES})
  add_library(sy::${name} ALIAS sy_${name})
  sy_target_defaults(sy_${name})
  target_include_directories(sy_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                               $<INSTALL_INTERFACE:include/switchyard>)
  target_link_libraries(sy_${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(sy_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON EXPORT_NAME ${name})
  # A sanitized static library needs the sanitizer runtime wherever it is linked: an installed
  # tree's consumer gets the flags from the exported target (the build tree has them globally).
  if(SY_SANITIZER_FLAGS)
    target_link_options(sy_${name} INTERFACE "$<INSTALL_INTERFACE:${SY_SANITIZER_FLAGS}>")
  endif()
  set_property(GLOBAL APPEND PROPERTY SY_LAYER_TARGETS sy_${name})
endfunction()

# `cmake --install build --prefix P`: the `switchyard` binary (bin/), every layer library (lib/,
# as the targets Switchyard::<layer>), the public headers (include/switchyard/, included as
# "runtime/core/status.h" just as in the tree) and the CMake package (lib/cmake/Switchyard/), so
# that another project does
#   find_package(Switchyard 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE Switchyard::inference)
# The libraries are static: SwitchyardConfig.cmake finds again every third-party library they
# link (find_dependency, pkg-config), with the features this build had (examples/consumer/).
include(CMakePackageConfigHelpers)

set(SY_INSTALL_CMAKEDIR lib/cmake/Switchyard)
get_property(sy_layer_targets GLOBAL PROPERTY SY_LAYER_TARGETS)

# The installed binary finds the shared libraries it was linked with (CUDA's, outside ld.so's
# paths) where the build found them.
set_target_properties(switchyard PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS ${sy_layer_targets} switchyard
        EXPORT SwitchyardTargets
        RUNTIME DESTINATION bin
        ARCHIVE DESTINATION lib
        LIBRARY DESTINATION lib)

# Public headers: every .h of the layers (no .cuh: no public header includes CUDA), and the
# generated build_info.h.
install(DIRECTORY runtime storage optim parallel inference launcher
        DESTINATION include/switchyard
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/generated/runtime/core/build_info.h
        DESTINATION include/switchyard/runtime/core)

install(EXPORT SwitchyardTargets NAMESPACE Switchyard:: DESTINATION ${SY_INSTALL_CMAKEDIR})

# What the config must find again: the features of this build, as 0/1.
foreach(feature MPI IO_URING PMEM HDF5 NCCL)
  if(SY_HAVE_${feature})
    set(SY_CONFIG_HAVE_${feature} 1)
  else()
    set(SY_CONFIG_HAVE_${feature} 0)
  endif()
endforeach()
foreach(pkg XXHASH SENTENCEPIECE ICU_UC MICROHTTPD)
  if(${pkg}_FOUND)
    set(SY_CONFIG_HAVE_${pkg} 1)
  else()
    set(SY_CONFIG_HAVE_${pkg} 0)
  endif()
endforeach()
if(SY_ENABLE_CUDA)
  set(SY_CONFIG_HAVE_CUDA 1)
else()
  set(SY_CONFIG_HAVE_CUDA 0)
endif()
if(TARGET PNG::PNG)
  set(SY_CONFIG_HAVE_PNG 1)
else()
  set(SY_CONFIG_HAVE_PNG 0)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/SwitchyardConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/SwitchyardConfig.cmake
                              INSTALL_DESTINATION ${SY_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/SwitchyardConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/SwitchyardConfig.cmake
              ${PROJECT_BINARY_DIR}/SwitchyardConfigVersion.cmake
        DESTINATION ${SY_INSTALL_CMAKEDIR})
if(SY_HAVE_NCCL)
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/FindNCCL.cmake DESTINATION ${SY_INSTALL_CMAKEDIR})
endif()

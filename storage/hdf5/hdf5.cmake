# HDF5 checkpoints, compiled into sy::storage. storage/CMakeLists.txt includes this file after
# sy_add_layer(storage ...):
#   include(${CMAKE_CURRENT_SOURCE_DIR}/hdf5/hdf5.cmake)
# With HDF5 found (SY_HAVE_HDF5) the real writer and reader are built and linked against the
# library; without it, checkpoint_unavailable.cc makes every call return an Unavailable Status
# that says how to get HDF5, so the rest of Switchyard still builds and links.
set(sy_hdf5_dir ${CMAKE_CURRENT_LIST_DIR})

# sy_link_hdf5(target): HDF5's headers and library, privately (also for the tests and fuzzers that
# call HDF5 themselves). FindHDF5 (CMake >= 3.19) defines HDF5::HDF5; HDF5's own CMake package
# defines hdf5::hdf5.
function(sy_link_hdf5 target)
  if(TARGET HDF5::HDF5)
    target_link_libraries(${target} PRIVATE HDF5::HDF5)
  elseif(TARGET hdf5::hdf5)
    target_link_libraries(${target} PRIVATE hdf5::hdf5)
  else()
    target_include_directories(${target} PRIVATE ${HDF5_C_INCLUDE_DIRS})
    target_link_libraries(${target} PRIVATE ${HDF5_C_LIBRARIES})
  endif()
endfunction()

target_sources(sy_storage PRIVATE
  ${sy_hdf5_dir}/checkpoint_layout.cc
  ${sy_hdf5_dir}/checkpoint_set.cc
  ${sy_hdf5_dir}/durable_replace.cc
  ${sy_hdf5_dir}/hdf5_error_detail.cc
)
if(SY_HAVE_HDF5)
  target_sources(sy_storage PRIVATE
    ${sy_hdf5_dir}/checkpoint_reader.cc
    ${sy_hdf5_dir}/checkpoint_writer.cc
    ${sy_hdf5_dir}/hdf5_attributes.cc
    ${sy_hdf5_dir}/hdf5_dtype.cc
    ${sy_hdf5_dir}/hdf5_library.cc
  )
  sy_link_hdf5(sy_storage)
else()
  target_sources(sy_storage PRIVATE ${sy_hdf5_dir}/checkpoint_unavailable.cc)
endif()

# Checks that every #include in the layer folders goes to the file's own layer or a layer to its
# left (docs/design.md, "Layers"):
#
#   runtime  <  storage, optim  <  parallel  <  inference  <  launcher
#
# storage and optim are peers: neither includes the other. tests/, benchmarks/, fuzz/, examples/
# and python/ (the bindings) sit on top and may include anything, so they are not scanned. Only
# quoted includes whose first path part names a layer ("parallel/zero3.h") are checked; system
# headers pass.
#
#   cmake -DSY_SOURCE_DIR=<repository root> [-DSY_STAMP=<file to touch on success>]
#         -P tests/layering/check_layering.cmake
#
# Prints every violation as "<file>:<line>: <layer> includes <header>, ..." and fails when there
# is one. tests/layering/CMakeLists.txt runs it at build time and ctest runs it on a fixture.
cmake_minimum_required(VERSION 3.25)
if(NOT SY_SOURCE_DIR)
  message(FATAL_ERROR "check_layering.cmake: pass -DSY_SOURCE_DIR=<repository root>")
endif()

# Rank of each layer; a file may include a layer of lower rank, or its own.
set(sy_rank_runtime 0)
set(sy_rank_storage 1)
set(sy_rank_optim 1)
set(sy_rank_parallel 2)
set(sy_rank_inference 3)
set(sy_rank_launcher 4)
set(sy_layers runtime storage optim parallel inference launcher)

set(violations 0)
set(scanned 0)
foreach(layer IN LISTS sy_layers)
  set(allowed "")
  foreach(other IN LISTS sy_layers)
    if(other STREQUAL layer OR sy_rank_${other} LESS sy_rank_${layer})
      list(APPEND allowed ${other})
    endif()
  endforeach()
  list(JOIN allowed ", " allowed_text)
  file(GLOB_RECURSE files RELATIVE ${SY_SOURCE_DIR}
       ${SY_SOURCE_DIR}/${layer}/*.h ${SY_SOURCE_DIR}/${layer}/*.cc
       ${SY_SOURCE_DIR}/${layer}/*.cu ${SY_SOURCE_DIR}/${layer}/*.cuh)
  foreach(file IN LISTS files)
    math(EXPR scanned "${scanned} + 1")
    # One list item per line, so that a violation is reported with its line number. ';', '\\'
    # and square brackets are list syntax to CMake (an unbalanced '[' in a comment would merge
    # the lines after it), so they are replaced first; no include path contains them.
    file(READ ${SY_SOURCE_DIR}/${file} text)
    string(REPLACE ";" "," text "${text}")
    string(REPLACE "\\" "/" text "${text}")
    string(REPLACE "[" "(" text "${text}")
    string(REPLACE "]" ")" text "${text}")
    string(REPLACE "\n" ";" lines "${text}")
    set(line_number 0)
    foreach(line IN LISTS lines)
      math(EXPR line_number "${line_number} + 1")
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"(([a-z_]+)/[^\"]*)\"")
        continue()
      endif()
      set(header ${CMAKE_MATCH_1})
      set(target ${CMAKE_MATCH_2})
      if(NOT DEFINED sy_rank_${target} OR target IN_LIST allowed)
        continue()
      endif()
      message(NOTICE "${file}:${line_number}: ${layer} includes ${header}, from the layer "
                     "${target}; ${layer} may include only ${allowed_text} (docs/design.md, "
                     "\"Layers\")")
      math(EXPR violations "${violations} + 1")
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "layering: ${violations} #include(s) against the layer order in "
                      "${scanned} files; move the code to the right layer or invert the "
                      "dependency (an interface in the lower layer)")
endif()
if(SY_STAMP)
  file(TOUCH ${SY_STAMP})
endif()
message(STATUS "layering: ${scanned} files, every #include follows the layer order")

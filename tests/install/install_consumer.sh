#!/usr/bin/env bash
# Installs the build into a fresh prefix, then configures, builds and runs examples/consumer (a
# separate CMake project: find_package(Switchyard), a forward pass and greedy generation) against
# that prefix only, and runs the installed `switchyard --version`. Prints "PASS: " or "FAIL: ".
#
#   install_consumer.sh CMAKE BUILD_DIR SOURCE_DIR WORK_DIR [CXX_COMPILER]
# ctest (install_consumer) runs it on the test build, in WORK_DIR; so CI runs it too.
set -euo pipefail
cmake=$1 cxx=${5:-}
# Absolute paths: the consumer's CMAKE_PREFIX_PATH must not depend on where cmake runs.
build=$(realpath -m "$2") source=$(realpath -m "$3") work=$(realpath -m "$4")
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install $build"; }
for f in bin/switchyard lib/libsy_runtime.a lib/libsy_inference.a \
         include/switchyard/runtime/core/status.h include/switchyard/runtime/core/build_info.h \
         lib/cmake/Switchyard/SwitchyardConfig.cmake \
         lib/cmake/Switchyard/SwitchyardConfigVersion.cmake \
         lib/cmake/Switchyard/SwitchyardTargets.cmake; do
  [ -f "$prefix/$f" ] || fail "the install has no $f"
done
"$prefix/bin/switchyard" --version | grep -q '^switchyard [0-9]' ||
  fail "the installed switchyard --version"

# The consumer sees the prefix and nothing of the source or build tree but its own sources.
args=(-S "$source/examples/consumer" -B "$work/consumer-build" -DCMAKE_PREFIX_PATH="$prefix"
      -DCMAKE_BUILD_TYPE=Release)
[ -n "$cxx" ] && args+=(-DCMAKE_CXX_COMPILER="$cxx")
command -v ninja >/dev/null 2>&1 && args+=(-G Ninja)
"$cmake" "${args[@]}" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configuring examples/consumer against $prefix"; }
"$cmake" --build "$work/consumer-build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "building examples/consumer"; }
out=$("$work/consumer-build/consumer" cpu) || { echo "$out"; fail "examples/consumer exited $?"; }
echo "$out"
grep -q "^consumer: OK$" <<<"$out" || fail "examples/consumer did not say OK"
echo "PASS: installed into $prefix; examples/consumer built against it and ran"

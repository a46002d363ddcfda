#!/usr/bin/env bash
# Builds the tests with AddressSanitizer + UndefinedBehaviorSanitizer (or ThreadSanitizer with
# SANITIZER=thread) and runs them. CUDA is off in sanitizer builds.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${SANITIZER:-address}
if [ "$mode" = thread ]; then
  flags=(-DSY_SANITIZE_THREAD=ON)
  build_dir=${BUILD_DIR:-build-tsan}
else
  flags=(-DSY_SANITIZE_ADDRESS=ON -DSY_SANITIZE_UNDEFINED=ON)
  build_dir=${BUILD_DIR:-build-asan}
fi
BUILD_DIR=$build_dir scripts/build.sh -DSY_ENABLE_CUDA=OFF -DSY_BUILD_BENCHMARKS=OFF "${flags[@]}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# allocator_may_return_null: a failed allocation is input (ResourceExhausted), as the tests of
# absurd sizes check; ASan would otherwise abort on any request above its 1 TiB limit.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# TSan: the same for allocations (its limit is 1 TiB too); reports inside uninstrumented Open MPI
# (its lock order, its copies between threads) suppressed, see the file; a report fails the test.
export TSAN_OPTIONS=${TSAN_OPTIONS:-allocator_may_return_null=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan-suppressions.txt}
# Third-party leaks only (Open MPI's); see the file. Matching them needs full malloc stacks (Open
# MPI has no frame pointers), which cost time on every allocation: only the tests that run under
# mpirun (label mpi) take fast_unwind_on_malloc=0, in a second pass.
suppressions=suppressions=$PWD/scripts/lsan-suppressions.txt
status=0
LSAN_OPTIONS=$suppressions ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" \
  --timeout 1800 -LE '^mpi$' "$@" || status=$?
LSAN_OPTIONS=$suppressions:fast_unwind_on_malloc=0 ctest --test-dir "$build_dir" \
  --output-on-failure -j "$(nproc)" --timeout 1800 -L '^mpi$' "$@" || status=$?
exit "$status"

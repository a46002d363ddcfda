#!/usr/bin/env bash
# Packs what scripts/gpu/validate.sh runs on a GPU machine that has no Debian packages: the
# switchyard binary and the CUDA test binaries (stripped), every shared library they load except
# glibc, libstdc++ and the CUDA/NCCL runtime (the GPU machine's own are used), and Open MPI's
# components (for the one-rank MPI job that training starts). Output: .gpu/ (ignored by git).
#
#   BUILD_DIR=build-gpu scripts/gpu/bundle.sh
#
# Build BUILD_DIR for a generic x86-64 CPU, since the GPU machine's CPU is not this one:
#   cmake -S . -B build-gpu -G Ninja -DSY_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 \
#     -DCMAKE_C_FLAGS=-march=x86-64-v3 -DCMAKE_CUDA_ARCHITECTURES=90 -DSY_BUILD_BENCHMARKS=OFF
#   ninja -C build-gpu switchyard sy_backend_ops_test sy_runtime_core_test optim_cuda_test \
#     inference_kv_cache_decoder_test parallel_nccl_communicator_test sy_train_test \
#     inference_generate_engine_test inference_engine_thread_test
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-gpu}
out=.gpu
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/ompi"
binaries=(switchyard tests/runtime/sy_backend_ops_test tests/runtime/sy_runtime_core_test
          tests/optim/optim_cuda_test tests/inference/inference_kv_cache_decoder_test
          tests/parallel/parallel_nccl_communicator_test tests/train/sy_train_test
          tests/inference/inference_generate_engine_test tests/inference/inference_engine_thread_test)
for b in "${binaries[@]}"; do
  strip -o "$out/bin/$(basename "$b")" "$build/$b"
done
# mpirun (orterun) for the two-rank ZeRO-3 run; one node needs no orted.
cp /usr/bin/orterun "$out/bin/mpirun"
# The libraries: the closure that ldd resolves here, less the ones the GPU machine brings.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnccl)'
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
ldd "$out"/bin/* "$ompi_plugins"/*.so 2>/dev/null | awk '/=> \//{print $1" "$3}' | sort -u |
  while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$out/lib/$name"
  done
strip --strip-unneeded "$out"/lib/* 2>/dev/null || true
# Open MPI finds its components and help texts at the paths it was configured with; validate.sh
# copies these two folders there.
cp -a "$ompi_plugins" "$out/ompi/openmpi3"
cp -a /usr/share/openmpi "$out/ompi/share-openmpi"
[ -d /usr/lib/x86_64-linux-gnu/pmix2 ] && cp -a /usr/lib/x86_64-linux-gnu/pmix2 "$out/ompi/pmix2"
tar -C "$out" -cJf "$out/bundle.tar.xz" bin lib ompi
rm -rf "$out/bin" "$out/lib" "$out/ompi"
du -sh "$out/bundle.tar.xz"

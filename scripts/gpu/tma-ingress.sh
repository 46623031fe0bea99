#!/usr/bin/env bash
# Runs ON the lent H200: builds scripts/gpu/tma_ingress.cu for sm_90a and prints how fast one SM
# takes in the decode kernels' page blocks by TMA (see the .cu file's header), into $OUT/tma.txt.
# Needs .carry/ from scripts/gpu/bundle-deps.sh. Never changes GPU settings.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
# With the project's tensor-map encoder (cuda/tensor_map.cpp and the error type it throws, built
# by the host compiler as the project builds them; fmt header-only, from .carry/).
flags=(-O3 -std=c++20 -Ikernels -Isrc -I.carry/deps/include)
cuda_include="$(dirname "$(command -v nvcc)")/../include"
for unit in cuda/tensor_map core/error; do
  c++ "${flags[@]}" -I"$cuda_include" -DFMT_HEADER_ONLY -c "src/$unit.cpp" -o "/tmp/tma-ingress-${unit#*/}.o"
done
nvcc "${flags[@]}" -gencode arch=compute_90a,code=sm_90a -o /tmp/tma-ingress \
  scripts/gpu/tma_ingress.cu /tmp/tma-ingress-tensor_map.o /tmp/tma-ingress-error.o
/tmp/tma-ingress | tee "$out/tma.txt"

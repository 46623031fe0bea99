#!/usr/bin/env bash
# Runs ON the lent H200: builds scripts/gpu/tma_ingress.cu for sm_90a and prints how fast one SM
# takes in the decode kernels' page blocks by TMA (see the .cu file's header), into $OUT/tma.txt.
# Never changes GPU settings.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/tma-ingress scripts/gpu/tma_ingress.cu
/tmp/tma-ingress | tee "$out/tma.txt"

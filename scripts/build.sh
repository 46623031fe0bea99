#!/usr/bin/env bash
# Configures and builds mla.cpp into build/ (CUDA kernels for sm_90a when nvcc is on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${MLA_BUILD_JOBS:-$(nproc)}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$jobs"

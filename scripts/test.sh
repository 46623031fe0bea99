#!/usr/bin/env bash
# The tests, from a fresh machine: install dependencies, build everything (CUDA code included when
# nvcc is on PATH), run every CPU test (CTest label `cpu`, formatting check included).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh
cd build
ctest -L cpu --output-on-failure -j "${MLA_TEST_JOBS:-$(nproc)}"

#!/usr/bin/env bash
# The main job, from a fresh machine: install dependencies, build, run the decode demo (CPU
# reference; the GPU kernel too when an H100/H200 is present).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
scripts/build.sh
build/mla demo

#!/usr/bin/env bash
# Runs ON the lent H200: the 5-minute stability run of issue 6. Builds (no Python extension), then
# `mla bench throughput` on DeepSeek-V2-Lite shapes with dummy weights, 1000/1000 tokens and 256
# requests in flight, long enough to last about 5 minutes, with a timeline every 10 s (output
# tok/s per interval, free device memory, host RSS). Output: $OUT/stability.json and
# $OUT/stability.txt (text, progress and the build's tail on failure).
#   scripts/gpu/stability.sh [num_prompts]   (default 3600: ~5 min at ~12k output tok/s)
# Needs .carry/ from scripts/gpu/bundle-deps.sh. Never changes GPU settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
num_prompts="${1:-3600}"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
echo "== build ($(date -u +%H:%M:%S))" >"$out/stability.txt"
if ! { cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMLA_BUILD_PYTHON=OFF \
         -DMLA_DEPS_DIR="$PWD/.carry/deps" && cmake --build build-gpu -j "$(nproc)" --target mla; } \
       >build-gpu.log 2>&1; then
  tail -40 build-gpu.log >>"$out/stability.txt"
  echo "BUILD FAILED"
  exit 1
fi
echo "== mla bench throughput, $num_prompts prompts ($(date -u +%H:%M:%S))" >>"$out/stability.txt"
timeout -k 10 "${MLA_STABILITY_TIMEOUT:-480}" build-gpu/mla bench throughput --model-preset deepseek-v2-lite --load-format dummy \
  --input-len 1000 --output-len 1000 --num-prompts "$num_prompts" --max-concurrency 256 \
  --sample-seconds 10 --json >"$out/stability.json" 2>>"$out/stability.txt"
status=$?
echo "== done, status $status ($(date -u +%H:%M:%S))" >>"$out/stability.txt"
tr '\r' '\n' <"$out/stability.txt" | grep -vE "^mla bench: (requests|loading weights) \[" | tail -20
exit $status

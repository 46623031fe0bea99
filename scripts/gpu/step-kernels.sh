#!/usr/bin/env bash
# Runs ON the lent H200 after scripts/gpu/check.sh has built build-gpu/: every kernel of one eager
# decode step (DeepSeek-V2-Lite shapes, dummy weights, batch 128, 2k context) timed by Nsight
# Compute, grouped by kernel, against the graph step's time from the same process: the sum of the
# kernels' own durations vs the step shows what launches and gaps cost in a graph. ncu serialises
# kernels (no overlap, programmatic dependent launches included), and runs with
# --clock-control none: it never changes the GPU's clocks.
# Output: $OUT/step-kernels.txt (the table and the bench's own lines).
#   scripts/gpu/step-kernels.sh [batch] [context]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
batch="${1:-128}"
context="${2:-2048}"
if ! command -v ncu >/dev/null; then
  echo "no ncu on this machine" | tee "$out/step-kernels.txt"
  exit 1
fi
# bench step --profile runs one eager step between cudaProfilerStart/Stop, after its measurement.
timeout -k 10 400 ncu --clock-control none --profile-from-start off \
  --metrics gpu__time_duration.sum --csv --print-units base --log-file build-gpu/ncu-step.csv \
  build-gpu/mla bench step --model-preset deepseek-v2-lite --load-format dummy --batch "$batch" \
  --context "$context" --profile --runs 20 >build-gpu/ncu-step-bench.txt 2>&1
status=$?
{
  python3 scripts/gpu/summarize_kernels.py build-gpu/ncu-step.csv
  grep -E "^step:|roofline on|sum of ops" build-gpu/ncu-step-bench.txt
} >"$out/step-kernels.txt" 2>&1
cat "$out/step-kernels.txt"
exit $status

#!/usr/bin/env bash
# Runs ON the lent H200 after scripts/gpu/check.sh has built build-gpu/: where the time of a
# small-batch decode goes (issue 3's b = 1 and b = 8 targets). For each row:
#   1. Nsight Compute (--clock-control none, L2 flushed before each kernel) durations of the first
#      decode-op kernels (plan, split-KV, combine) of one run: the op's kernels against its
#      event-timed µs;
#   2. the plan's small-batch knob swept with the combine fused and launched
#      (MLA_DECODE_MIN_COST_PER_PART = 0 is the default plan; MLA_FUSED_COMBINE_MAX_MERGE_BYTES
#      huge = always fused, 0 = never), fast kernel, the bench's medians.
# Output: $OUT/decode-latency.txt. Never changes GPU settings.
#   scripts/gpu/decode-latency.sh ["b,s_q,h_q,s_k" ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("1,1,16,1024" "1,1,16,32768" "8,1,16,4096")
bench=(build-gpu/mla bench decode --kernel fast --flashmla-ref "")
{
  for row in "${rows[@]}"; do
    echo "=== $row"
    if command -v ncu >/dev/null; then
      timeout -k 10 120 ncu --clock-control none -k regex:mla_decode --launch-count 6 \
        --metrics gpu__time_duration.sum --csv --print-units base \
        --log-file build-gpu/ncu-decode.csv "${bench[@]}" --only "$row" --runs 1 >/dev/null 2>&1
      python3 scripts/gpu/summarize_kernels.py build-gpu/ncu-decode.csv
    fi
    for cost in 0 2 4 8 16; do
      for merge in 1000000000000000 0; do
        result=$(MLA_DECODE_MIN_COST_PER_PART=$cost MLA_FUSED_COMBINE_MAX_MERGE_BYTES=$merge \
          timeout -k 10 60 "${bench[@]}" --only "$row" 2>&1 | grep -E "^fast " | tr -s ' ')
        echo "min cost per part $cost, $([ $merge = 0 ] && echo launched || echo fused) combine: $result"
      done
    done
  done
} 2>&1 | tee "$out/decode-latency.txt"

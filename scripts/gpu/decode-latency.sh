#!/usr/bin/env bash
# Runs ON the lent H200 after scripts/gpu/check.sh has built build-gpu/: where the time of a
# small-batch decode goes (issue 3's b = 1 and b = 8 targets). For each row:
#   1. Nsight Compute (--clock-control none, L2 flushed before each kernel) durations of the decode
#      op's kernels (split-KV, combine) of the first two runs, against the op's event-timed µs;
#   2. `mla bench decode --kernel combine-ab` (baseline, fast, fast_fused, fast_launched interleaved
#      in one run), then fast_launched again with the sliced small-batch combine forced
#      (MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ=0, no row limit) and with one warp per row.
# Output: $OUT/decode-latency.txt. Never changes GPU settings.
#   scripts/gpu/decode-latency.sh ["b,s_q,h_q,s_k" ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("1,1,16,1024" "1,1,16,4096" "1,1,16,32768" "8,1,16,4096"
  "8,1,128,4096" "32,1,16,4096" "1,2,128,8192")
bench=(build-gpu/mla bench decode --kernel fast --flashmla-ref "")
{
  for row in "${rows[@]}"; do
    echo "=== $row"
    if command -v ncu >/dev/null; then
      timeout -k 10 120 ncu --clock-control none -k regex:"mla_decode_(splitkv|combine)" \
        --launch-count 4 --metrics gpu__time_duration.sum --csv --print-units base \
        --log-file build-gpu/ncu-decode.csv "${bench[@]}" --only "$row" --runs 1 >/dev/null 2>&1
      python3 scripts/gpu/summarize_kernels.py build-gpu/ncu-decode.csv
    fi
    # baseline, fast (the default combine), fast_fused and fast_launched, interleaved in one run.
    timeout -k 10 90 build-gpu/mla bench decode --kernel combine-ab --flashmla-ref "" --only "$row" \
      2>/dev/null | grep -E "^(baseline|fast)" | tr -s ' '
    for combine in sliced per-row; do
      case $combine in
        sliced) env_args=(MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ=0
                                  MLA_DECODE_SMALL_BATCH_MAX_ROWS=1000000000) ;;
        per-row) env_args=(MLA_DECODE_SMALL_BATCH_MIN_PARTS_PER_SEQ=1000000) ;;
      esac
      result=$(env "${env_args[@]}" timeout -k 10 60 build-gpu/mla bench decode --kernel combine-ab \
        --flashmla-ref "" --only "$row" 2>/dev/null | grep -E "^fast_launched " | tr -s ' ')
      echo "$combine: $result"
    done
  done
} 2>&1 | tee "$out/decode-latency.txt"

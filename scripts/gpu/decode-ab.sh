#!/usr/bin/env bash
# Runs ON the lent H200: the decode kernels of this tree ("tree") against the revisions bundled by
# scripts/gpu/bundle-ab.sh (.carry/ab/<name>/), measured the way docs/kernels/mla_decode.md
# ("Ninth session") found trustworthy. The same row moves by up to 8 % between processes, and
# the whole machine by a few per cent between calls, so nothing here compares times across calls:
#   1. builds the tree for sm_90a (and each revision's `mla` alongside) and runs the whole GPU
#      label on the tree;
#   2. whole sweeps (`mla bench decode --kernel all`, ~5 s each), the builds alternating, judged
#      by fast/baseline per row (baseline's code is the same in every build);
#   3. single rows in alternating processes, fast/baseline from one interleaved run each;
#   4. optionally the pairs order's trace of each build on some rows;
#   5. scripts/gpu/ab_summary.py: each build against the first revision, medians per row and
#      geometric means per row class.
# Output under $OUT (the machine returns at most 8 files): build.log, ptxas.txt, ab.log (all
# that is printed), ab-summary.txt, and sweeps-<name>.json per build (a list of sweep objects).
# Environment: MLA_AB_SWEEPS (sweeps per build, default 2), MLA_AB_REPS (repetitions of the
# rows, default 3), MLA_AB_ROWS (b,s_q,h_q,s_k ..., default: seven compute- and memory-bound
# rows), MLA_AB_TRACE (rows to trace, default none), MLA_AB_TIMELINE (rows whose phase timeline
# `mla bench decode --timeline` prints for every build, default none), MLA_AB_SKIP_TESTS=1 (not
# for a call whose results decide anything: the rule is the whole GPU label on every call).
# MLA_AB_ENV="name:VAR=VALUE[,VAR=VALUE] ...": the tree's `mla` run under each environment as its
# own build (e.g. "pairs:MLA_DECODE_SEESAW=4 lockstep:MLA_DECODE_SEESAW=0"; the first is then the
# reference), instead of the plain tree. MLA_AB_NCU="b,s_q,h_q,s_k ...": per build and row,
# Nsight Compute's DRAM bytes read, L2 hit rate and duration of fast's split-KV kernel (one launch
# after the first; caches flushed before it, clocks as found; MLA_AB_NCU_KERNEL=regex picks another
# kernel, e.g. mla_decode_combine). MLA_AB_NCU_METRICS="m1,m2,...":
# other metrics for those rows (kept to the names this machine's ncu lists, the rest reported).
# Needs .carry/ from scripts/gpu/bundle-deps.sh. Never changes GPU settings.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/common.sh
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
sweeps="${MLA_AB_SWEEPS:-2}"
reps="${MLA_AB_REPS:-3}"
rows="${MLA_AB_ROWS:-128,2,128,8192 32,2,128,4096 128,1,128,1024 128,1,128,8192 128,2,64,4096 128,1,64,8192 128,1,16,4096}"
work="build-ab-work"
rm -rf "$work"
mkdir -p "$work"

main() {
  local t0
  t0=$(date +%s)
  date -u
  echo "tree: $(cat .carry/commit 2>/dev/null || echo unknown)"
  mla_gpu_build "$out" "$t0" || return 1

  # Each build is "tag:binary:environment" (VAR=VALUE pairs joined by commas, or nothing).
  local builds=("tree:build-gpu/mla:") dir name variant
  if [ -n "${MLA_AB_ENV:-}" ]; then
    builds=()
    for variant in $MLA_AB_ENV; do builds+=("${variant%%:*}:build-gpu/mla:${variant#*:}"); done
  fi
  for dir in .carry/ab/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    builds+=("$name:build-ab-$name/mla:")
    (
      if { mla_gpu_configure "$dir" "build-ab-$name" -DMLA_BUILD_PYTHON=OFF && cmake --build "build-ab-$name" -j 6 --target mla; } \
        >"$work/build-$name.log" 2>&1; then
        echo "$name ($(cat "$dir/AB_COMMIT")) built"
      else
        echo "$name BUILD FAILED"
        grep -E "error" "$work/build-$name.log" | head -10
      fi
    ) &
  done

  if [ -z "${MLA_AB_SKIP_TESTS:-}" ]; then
    mla_gpu_label "$work/ctest.log"
  else
    echo "MLA_AB_SKIP_TESTS: the GPU label was not run"
  fi
  wait
  echo "builds and tests done ($(($(date +%s) - t0)) s)"

  local s tb tag bin row rep text environment
  # Sets tag, bin and environment (an array for env) from build $1.
  parse_build() {
    tag=${1%%:*}
    local rest=${1#*:}
    bin=${rest%%:*}
    IFS=, read -r -a environment <<<"${rest#*:}"
  }
  for s in $(seq "$sweeps"); do
    for tb in "${builds[@]}"; do
      parse_build "$tb"
      [ -x "$bin" ] || continue
      env "${environment[@]}" "$bin" bench decode --kernel all --commit "$tag" \
        --json "$work/sweep-$tag-$s.json" >/dev/null 2>&1 || echo "sweep $s of $tag failed"
    done
  done
  for tb in "${builds[@]}"; do
    tag=${tb%%:*}
    local files=() s
    for s in $(seq "$sweeps"); do
      [ -f "$work/sweep-$tag-$s.json" ] && files+=("$work/sweep-$tag-$s.json")
    done
    python3 -c 'import json, sys; json.dump([json.load(open(p)) for p in sys.argv[2:]], open(sys.argv[1], "w"))' \
      "$out/sweeps-$tag.json" "${files[@]}" 2>/dev/null
  done
  echo "sweeps done ($(($(date +%s) - t0)) s)"

  # One line per row and process: "AB <build> <row> <rep> <fast µs> <baseline µs>". The bench's
  # progress counter goes to stderr without a newline, so stderr is dropped.
  for rep in $(seq "$reps"); do
    for tb in "${builds[@]}"; do
      parse_build "$tb"
      [ -x "$bin" ] || continue
      for row in $rows; do
        text=$(env "${environment[@]}" "$bin" bench decode --only "$row" --kernel all --runs 30 \
          --flashmla-ref '' 2>/dev/null)
        echo "AB $tag $row $rep $(kernel_us "$text" fast) $(kernel_us "$text" baseline)"
      done
    done
  done
  if [ -n "${MLA_AB_NCU:-}" ] && command -v ncu >/dev/null; then
    local metrics="dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum" known m
    if [ -n "${MLA_AB_NCU_METRICS:-}" ]; then
      ncu --query-metrics >"$work/ncu-metrics.txt" 2>&1
      known="gpu__time_duration.sum"
      for m in ${MLA_AB_NCU_METRICS//,/ }; do
        if grep -q "^${m%%.*} " "$work/ncu-metrics.txt"; then known="$known,$m"; else echo "NCU metric not on this machine: $m"; fi
      done
      metrics=$known
      echo "NCU metrics: $metrics"
    fi
    for tb in "${builds[@]}"; do
      parse_build "$tb"
      [ -x "$bin" ] || continue
      for row in $MLA_AB_NCU; do
        env "${environment[@]}" timeout -k 10 120 ncu --clock-control none \
          -k "regex:${MLA_AB_NCU_KERNEL:-mla_decode_splitkv}" --launch-skip 1 --launch-count 1 \
          --metrics "$metrics" \
          --csv --print-units base --log-file "$work/ncu.csv" \
          "$bin" bench decode --only "$row" --kernel fast --runs 2 --flashmla-ref '' >/dev/null 2>&1
        python3 - "$tag" "$row" "$work/ncu.csv" <<'PY'
import csv, sys
tag, row, path = sys.argv[1:4]
lines = [line for line in open(path, encoding="utf-8") if line.startswith('"')]
values = {r["Metric Name"]: r["Metric Value"] for r in csv.DictReader(lines)}
print("NCU", tag, row, " ".join(f"{k}={v}" for k, v in sorted(values.items())) or "no result")
PY
      done
    done
  fi
  for tb in "${builds[@]}"; do
    parse_build "$tb"
    [ -x "$bin" ] || continue
    for row in ${MLA_AB_TIMELINE:-}; do
      echo "== timeline of $tag, $row"
      env "${environment[@]}" "$bin" bench decode --only "$row" --kernel fast --timeline \
        --flashmla-ref '' 2>/dev/null | sed -n '/^timeline/,/^  a streaming kernel/p'
    done
    for row in ${MLA_AB_TRACE:-}; do
      echo "== pair trace of $tag, $row"
      env "${environment[@]}" "$bin" bench decode --only "$row" --kernel fast --pair-trace \
        --flashmla-ref '' 2>/dev/null | sed -n '/^pair trace/,$p'
    done
  done
  echo "end ($(($(date +%s) - t0)) s)"
}

# The µs column of kernel $2's row in the bench's text $1 (kernel b s_q h_q s_k µs ...).
kernel_us() {
  grep -oE "^$2 +[0-9]+ +[0-9]+ +[0-9]+ +[^ ]+ +[0-9.]+" <<<"$1" | awk '{print $6}' | head -1
}

main 2>&1 | tee "$out/ab.log"
python3 scripts/gpu/ab_summary.py "$out/ab.log" "$out"/sweeps-*.json | tee "$out/ab-summary.txt"

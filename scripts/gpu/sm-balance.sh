#!/usr/bin/env bash
# Runs ON the lent H200: the decode plan balanced by SM against the usual plan
# (docs/kernels/mla_decode.md, "Eighteenth session"), in one call:
#   1. builds the tree for sm_90a and runs the whole GPU label (the balanced plan's tests are in
#      it: MlaDecodeGpuSmBalanced.*, and SmStreamGpu.*);
#   2. per weights source (stream: the SMs' streaming rates; decode: the row's own decode) and row,
#      MLA_SB_REPS processes (default 2) of `mla bench decode --only ROW --kernel fast`: fast, its
#      twins fast_smbal (shares following the weights), fast_smeq (the same with every SM weighing
#      1) and fast_smrank (the usual plan, parts ranked by the weights), timed interleaved in one
#      process (medians of 30 runs each);
#   3. per source and row, the medians over the processes of smbal / fast, smbal / smeq (the
#      weights' own effect), smeq / fast (the plan's shape: the usual plan keeps whole sequences
#      at b = 128, 4k and 8k) and smrank / fast, and their geometric means
#      (sm_balance_summary.py);
#   4. timelines of b = 128, h_q = 16 at 32k / 8k / 4k with streaming weights: the usual plan's
#      per-SM finish against the streaming kernel's per-SM rate ("with the decode's per-SM
#      finish"), the twins' finish spread, and how many CTAs ran their own SM's part. After the
#      A/B, so that a call that runs out of time keeps it;
#   5. while time is left (MLA_SB_DEADLINE_S, default 540 s after the start), the fused merge
#      against the launched combine on the small batches (`--kernel combine-ab`: fast_fused and
#      fast_launched interleaved, two processes per row; docs/kernels/mla_decode.md, eighteenth
#      session, item 2) into combine-ab.txt.
# Output under $OUT: build.log, ptxas.txt, ctest.log, ab.log (all the bench printed), rows.jsonl
# (one line per process and row), summary.txt, timelines.txt, combine-ab.txt. Environment:
# MLA_SB_REPS,
# MLA_SB_ROWS (b,s_q,h_q,s_k ..., default the 16-row rows of the sweep that matter: b = 128 at
# 4k, 8k, 32k and varlen, b = 32 and 8 at 4k, b = 1 at 1k and 32k), MLA_SB_SKIP_TESTS=1 (not for
# a call whose results decide anything). Needs .carry/ from scripts/gpu/bundle-deps.sh. Never
# changes GPU settings.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
source scripts/gpu/common.sh
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
reps="${MLA_SB_REPS:-2}"
rows="${MLA_SB_ROWS:-128,1,16,4096 128,1,16,8192 128,1,16,32768 128,1,16,0 32,1,16,4096 8,1,16,4096 1,1,16,1024 1,1,16,32768}"

t0=$(date +%s)
date -u
echo "tree: $(cat .carry/commit 2>/dev/null || echo unknown)"
mla_gpu_build "$out" "$t0" || exit 1

if [ -z "${MLA_SB_SKIP_TESTS:-}" ]; then
  # A test that hangs (a wait that never ends) costs this much of the call, not 300 s.
  MLA_CTEST_TIMEOUT="${MLA_CTEST_TIMEOUT:-150}" mla_gpu_label "$out/ctest.log"
else
  echo "MLA_SB_SKIP_TESTS: the GPU label was not run"
fi
echo "tests done ($(($(date +%s) - t0)) s)"

: >"$out/rows.jsonl"
for rep in $(seq "$reps"); do
  for source in stream decode; do
    for row in $rows; do
      json="build-gpu/sb-$source-$rep.json"
      if MLA_BENCH_SM_WEIGHTS=$source build-gpu/mla bench decode --only "$row" --kernel fast \
        --flashmla-ref '' --json "$json" >>"$out/ab.log" 2>&1; then
        python3 - "$json" "$source" "$rep" "$row" >>"$out/rows.jsonl" <<'EOF'
import json, sys
path, source, rep, row = sys.argv[1:]
data = json.load(open(path))
rows = data["rows"] if isinstance(data, dict) else data
us = {r["kernel"]: r["us"] for r in rows}
print(json.dumps({"source": source, "rep": int(rep), "row": row, "us": us}))
EOF
      else
        echo "$source $row (rep $rep) failed:"
        tail -3 "$out/ab.log"
      fi
    done
  done
done
python3 scripts/gpu/sm_balance_summary.py "$out/rows.jsonl" | tee "$out/summary.txt"
echo "A/B done ($(($(date +%s) - t0)) s)"

for row in 128,1,16,32768 128,1,16,8192 128,1,16,4096; do
  MLA_BENCH_SM_WEIGHTS=stream build-gpu/mla bench decode --only "$row" --kernel fast --timeline \
    --flashmla-ref '' >>"$out/timelines.txt" 2>&1 || echo "timeline of $row failed"
done
grep -E "^timeline|correlation|streaming|SM weights|balanced by SM" "$out/timelines.txt"
echo "timelines done ($(($(date +%s) - t0)) s)"

deadline="${MLA_SB_DEADLINE_S:-540}"
for rep in 1 2; do
  for row in 1,1,16,1024 1,1,16,32768 8,1,16,4096 32,1,16,4096; do
    if [ $(($(date +%s) - t0)) -ge "$deadline" ]; then
      echo "combine A/B: stopped at the deadline (${deadline} s)"
      break 2
    fi
    json="build-gpu/combine-ab-$rep.json"
    if build-gpu/mla bench decode --only "$row" --kernel combine-ab --flashmla-ref '' \
      --json "$json" >>"$out/ab.log" 2>&1; then
      python3 - "$json" "$row" "$rep" >>"$out/combine-ab.txt" <<'EOF'
import json, sys
path, row, rep = sys.argv[1:]
us = {r["kernel"]: r["us"] for r in json.load(open(path))["rows"]}
fused, launched = us.get("fast_fused"), us.get("fast_launched")
ratio = f"{fused / launched:.4f}" if fused and launched else "-"
print(f"{row:<14} rep {rep}: fused {fused} us, launched {launched} us, fused/launched {ratio}")
EOF
    else
      echo "combine-ab $row (rep $rep) failed:"
      tail -3 "$out/ab.log"
    fi
  done
done
[ -f "$out/combine-ab.txt" ] && cat "$out/combine-ab.txt"
echo "done ($(($(date +%s) - t0)) s)"

#!/usr/bin/env bash
# Runs ON the lent H200 after a build in build-gpu/: where a decode kernel's warps wait. For each
# row, Nsight Compute profiles one launch of the kernels matching KERNEL_REGEX (default: the seesaw
# body) with the speed-of-light, warp-state, compute, memory and source-counter sections, then
# prints the tensor-pipe and DRAM figures, the stall reasons, and the SASS instructions where most
# warp samples stalled (scripts/gpu/ncu_stalls.py). Output: $OUT/decode-profile.txt and, per row,
# the report's source page as gzipped CSV. Clocks as found (--clock-control none); never changes GPU
# settings.
#   KERNEL_REGEX=seesaw scripts/gpu/decode-profile.sh "b,s_q,h_q,s_k" ...
# MLA_PROFILE_ARGS: more arguments for the bench, e.g. "--flashmla-same-run" with
# KERNEL_REGEX=flash_fwd_splitkv to profile FlashMLA's kernel (a build with MLA_FLASHMLA_DIR).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
regex="${KERNEL_REGEX:-mla_decode_splitkv_seesaw}"
kernel="${MLA_PROFILE_KERNEL:-fast}"
read -r -a extra <<<"${MLA_PROFILE_ARGS:-}"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("128,2,128,8192")
command -v ncu >/dev/null || { echo "ncu not found"; exit 1; }
{
  for row in "${rows[@]}"; do
    name="profile-${regex//[^A-Za-z0-9]/_}-${row//,/_}"
    echo "=== $row ($regex, --kernel $kernel)"
    timeout -k 10 240 ncu --clock-control none -k regex:"$regex" --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section SourceCounters --import-source no \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,sm__cycles_elapsed.avg.per_second \
      -f -o "build-gpu/$name" build-gpu/mla bench decode --kernel "$kernel" --flashmla-ref "" \
      --only "$row" --runs 2 "${extra[@]}" >"build-gpu/$name.log" 2>&1 || { echo "ncu failed"; tail -20 "build-gpu/$name.log"; continue; }
    ncu -i "build-gpu/$name.ncu-rep" --page details --csv >"build-gpu/$name-details.csv" 2>&1
    ncu -i "build-gpu/$name.ncu-rep" --page source --csv --print-source sass \
      >"build-gpu/$name-source.csv" 2>&1
    gzip -c "build-gpu/$name-source.csv" >"$out/$name-source.csv.gz"
    python3 scripts/gpu/ncu_stalls.py "build-gpu/$name-details.csv" "build-gpu/$name-source.csv"
  done
} 2>&1 | tee "$out/decode-profile.txt"

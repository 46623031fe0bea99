#!/usr/bin/env bash
# Runs ON the lent H200 after a build in build-gpu/ (with .carry/flashmla for FlashMLA's rows):
# ours against DeepSeek FlashMLA, each kernel ALONE for a few seconds per row, while nvidia-smi
# samples the board's power draw, SM and memory clocks and the clock-event reasons every 50 ms
# (reading only: nothing here changes a GPU setting). Then Nsight Compute's cycles, SM clock,
# instructions, shared-memory wavefronts, L2 and DRAM figures of one launch of each kernel.
# The question it answers: at the card's power cap, does a kernel run slower because its clock is
# lower (energy per unit of work) or because it needs more cycles?
# Caveat: the bench's method flushes the L2 (a 256 MiB memset, ~60-90 µs) before every timed run,
# so the samples describe the kernel and the flushes together: ~3 % flush on a 2 ms row, ~20 % on
# a 300 µs one. Compare rows of similar length.
# Output: $OUT/decode-power.txt.
#   scripts/gpu/decode-power.sh ["b,s_q,h_q,s_k" ...]
# MLA_POWER_SECONDS: how long each kernel runs per row (default 3).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
seconds="${MLA_POWER_SECONDS:-3}"
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=("128,1,128,32768" "128,1,128,8192" "128,2,128,8192" "128,1,16,8192")
bench=(build-gpu/mla bench decode --flashmla-ref "")
kernels=(fast)
flashmla_note=""
# FlashMLA's rows when this build has it (the probe's error is shown when it does not).
if probe=$("${bench[@]}" --kernel flashmla --only 1,1,16,1024 --runs 1 2>&1); then
  kernels+=(flashmla)
else
  flashmla_note="FlashMLA's rows skipped: $(tail -1 <<<"$probe")"
fi
sampler=""
trap '[ -n "$sampler" ] && kill "$sampler" 2>/dev/null' EXIT

# The board's fields this driver knows, from the wanted ones (instant power if it has it).
fields=""
for f in power.draw.instant power.draw clocks.sm clocks.mem temperature.gpu clocks_event_reasons.active; do
  if nvidia-smi --query-gpu="$f" --format=csv,noheader >/dev/null 2>&1; then fields="${fields:+$fields,}$f"; fi
done

# The µs column of the kernel's row (kernel b s_q h_q s_k µs ...) in the bench's text on stdin.
kernel_us() { grep -oE "^$1 +[0-9]+ +[0-9]+ +[0-9]+ +[^ ]+ +[0-9.]+" | awk '{print $6}' | head -1; }

{
  [ -n "$flashmla_note" ] && echo "$flashmla_note"
  echo "sampled fields: $fields"
  for row in "${rows[@]}"; do
    for kernel in "${kernels[@]}"; do
      us=$(timeout -k 5 60 "${bench[@]}" --kernel "$kernel" --only "$row" --runs 5 2>/dev/null | kernel_us "$kernel")
      [ -n "$us" ] || { echo "=== $row $kernel: no time (bench failed)"; continue; }
      runs=$(python3 -c "print(max(20, min(100000, int($seconds * 1e6 / ($us + 90)))))")
      samples=$(mktemp)
      nvidia-smi --query-gpu="$fields" --format=csv,noheader,nounits -lms 50 >"$samples" 2>/dev/null &
      sampler=$!
      start=$(date +%s.%N)
      text=$(timeout -k 5 120 "${bench[@]}" --kernel "$kernel" --only "$row" --runs "$runs" 2>/dev/null)
      end=$(date +%s.%N)
      kill "$sampler" 2>/dev/null
      wait "$sampler" 2>/dev/null
      sampler=""
      timed=$(kernel_us "$kernel" <<<"$text")
      # The samples of the middle of the process (setup and teardown left out).
      python3 - "$row" "$kernel" "$timed" "$runs" "$start" "$end" "$fields" "$samples" <<'PY'
import statistics, sys
row, kernel, us, runs, start, end, fields, path = sys.argv[1:]
names = fields.split(",")
lines = [l.strip() for l in open(path) if l.strip()]
n = len(lines)
middle = lines[int(n * 0.4): max(int(n * 0.4) + 1, int(n * 0.95))]
columns = {name: [] for name in names}
for line in middle:
    parts = [p.strip() for p in line.split(",")]
    for name, value in zip(names, parts):
        columns[name].append(value)
summary = []
for name, values in columns.items():
    numbers = []
    for v in values:
        try:
            numbers.append(float(v))
        except ValueError:
            pass
    if numbers and name != "clocks_event_reasons.active":
        summary.append(f"{name} median {statistics.median(numbers):.0f} (min {min(numbers):.0f}, max {max(numbers):.0f})")
    elif values:
        common = max(set(values), key=values.count)
        summary.append(f"{name} mostly {common} ({values.count(common)} of {len(values)})")
print(f"=== {row} {kernel}: {us} µs median over {runs} runs, {float(end) - float(start):.1f} s, "
      f"{len(middle)} of {n} samples")
for s in summary:
    print("   ", s)
PY
      rm -f "$samples"
    done
  done

  if command -v ncu >/dev/null; then
    metrics="gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
    for row in "${rows[@]}"; do
      for kernel in "${kernels[@]}"; do
        regex="mla_decode_splitkv"
        [ "$kernel" = flashmla ] && regex="flash_fwd_splitkv"
        timeout -k 10 180 ncu --clock-control none -k regex:"$regex" --launch-skip 1 --launch-count 1 \
          --metrics "$metrics" --csv --print-units base --log-file build-gpu/ncu-power.csv \
          "${bench[@]}" --kernel "$kernel" --only "$row" --runs 2 >/dev/null 2>&1
        python3 - "$row" "$kernel" build-gpu/ncu-power.csv <<'PY'
import csv, sys
row, kernel, path = sys.argv[1:4]
try:
    lines = [line for line in open(path, encoding="utf-8") if line.startswith('"')]
except OSError:
    lines = []
values = {r["Metric Name"]: r["Metric Value"] for r in csv.DictReader(lines)}
print("NCU", row, kernel, " ".join(f"{k}={v}" for k, v in sorted(values.items())) or "no result")
PY
        rm -f build-gpu/ncu-power.csv
      done
    done
  fi
} 2>&1 | tee "$out/decode-power.txt"

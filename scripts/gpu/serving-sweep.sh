#!/usr/bin/env bash
# Runs ON the lent H200 after scripts/gpu/check.sh has built build-gpu/: `mla bench throughput` on
# DeepSeek-V2-Lite shapes (dummy weights) at the input/output lengths DeepSeek users quote, plus
# 1000/1000 with 100 prompts (the vLLM pull-request comment's setting), each under a timeout.
# Output: $OUT/serving.json (one JSON object per configuration, in a list) and the text on stdout.
#   scripts/gpu/serving-sweep.sh
# Never changes GPU settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
status=0
# input output prompts concurrency
configs=("1000 1000 100 100" "5000 1000 128 128" "10000 500 64 64" "32000 100 32 32")
echo "[" >"$out/serving.json"
first=1
for config in "${configs[@]}"; do
  read -r input output prompts concurrency <<<"$config"
  echo "== mla bench throughput $input/$output, $prompts prompts, $concurrency concurrent ($(date -u +%H:%M:%S))"
  if timeout -k 10 150 build-gpu/mla bench throughput --model-preset deepseek-v2-lite \
       --load-format dummy --input-len "$input" --output-len "$output" --num-prompts "$prompts" \
       --max-concurrency "$concurrency" --max-num-batched-tokens 8192 --json \
       >build-gpu/serving-one.json 2>build-gpu/serving-one.txt; then
    [ $first = 1 ] || echo "," >>"$out/serving.json"
    cat build-gpu/serving-one.json >>"$out/serving.json"
    first=0
  else
    echo "FAILED ($?)"
    status=1
  fi
  tr '\r' '\n' <build-gpu/serving-one.txt | grep -vE "^mla bench: (requests|loading weights) \[" |
    grep -E "requests in|TTFT|decode steps|mixed/prefill|memory:|error"
done
echo "]" >>"$out/serving.json"
exit $status

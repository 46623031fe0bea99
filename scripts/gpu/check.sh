#!/usr/bin/env bash
# Runs ON the lent H200 (see docs/gpu.md): builds for sm_90a, runs every GPU test (ctest -L gpu),
# the CPU tests, the demo, the decode benchmark and the whole-model benchmarks (`mla bench step`
# and `mla bench throughput` on DeepSeek-V2-Lite shapes with dummy weights), and leaves logs and
# JSON under $OUT (at most 8 files: env.txt, build.log, ctest-gpu.log, ctest-cpu.log with the
# demo's output, bench-decode.json, bench-decode.txt with the model benchmarks' text,
# bench-model.json, and ncu.txt with MLA_PROFILE). Where
# python3 has CUDA torch, the build includes the PyTorch extension (python/), and its pytest suite
# and API benchmark run after the GPU tests (their output is appended to ctest-gpu.log: the lent
# machine returns at most 8 files). A broken extension build does not stop the rest: the project is
# then rebuilt without it and the run fails at the end.
#   scripts/gpu/check.sh [full|quick]   (full: the whole benchmark sweep)
# Order: build, GPU tests, the whole-model benchmarks, the decode benchmark, the Python suite, the
# CPU tests and the demo (what matters most first, in case the call's time runs out).
# With .carry/flashmla (scripts/gpu/flashmla-bundle.sh) the build includes DeepSeek FlashMLA's
# dense decode and the decode benchmark times it beside ours (--flashmla-same-run).
# MLA_SKIP_PYTHON=1 builds without the PyTorch extension and skips its suite; MLA_SKIP_MODEL_BENCH=1
# skips the whole-model benchmarks; MLA_DECODE_KERNELS
# picks the decode benchmark's --kernel (all, seesaw-ab, combine-ab, ...); MLA_CTEST_TIMEOUT bounds
# each GPU test (seconds).
# Needs .carry/ from scripts/gpu/bundle-deps.sh. Never changes GPU settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/common.sh
mode="${1:-full}"
out="${OUT:-/tmp/mla-out}"
mkdir -p "$out"
commit=$(cat .carry/commit 2>/dev/null || echo unknown)
status=0
step() { echo "== $* ($(date -u +%H:%M:%S))"; }

{
  date -u
  echo "commit: $commit"
  nvidia-smi
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.draw,power.limit,temperature.gpu --format=csv
  nvcc --version | tail -2
  cmake --version | head -1
  c++ --version | head -1
  nproc
} >"$out/env.txt" 2>&1

step "configure + build (sm_90a)"
configure_and_build() {
  rm -f build-gpu/python/mla_decode/_C*.so  # rebuilt when the extension is on: never a stale one
  mla_gpu_configure . build-gpu "$@" && cmake --build build-gpu -j "$(nproc)"
}
python_mode=AUTO
[ -n "${MLA_SKIP_PYTHON:-}" ] && python_mode=OFF  # saves the extension's build and its suite
if ! configure_and_build -DMLA_BUILD_PYTHON=$python_mode >"$out/build.log" 2>&1; then
  echo "BUILD FAILED with the Python extension (MLA_BUILD_PYTHON=AUTO); again without it"
  grep -E "error|Error" "$out/build.log" | head -20
  status=1
  if ! configure_and_build -DMLA_BUILD_PYTHON=OFF >>"$out/build.log" 2>&1; then
    echo "BUILD FAILED"; tail -40 "$out/build.log"; exit 1
  fi
fi
grep -E "mla.cpp: Python extension" "$out/build.log" | tail -1
grep -E "Compiling entry|registers|spill" "$out/build.log" | grep -B1 -A1 "mla_decode" | head -40

step "GPU tests"
# Four at a time, but one by one for those in MLA_GPU_SERIAL_TESTS (common.sh).
gpu_ctest() { (cd build-gpu && ctest -L gpu --output-on-failure --timeout "${MLA_CTEST_TIMEOUT:-600}" "$@"); }
gpu_ctest -j 4 -E "$MLA_GPU_SERIAL_TESTS" >"$out/ctest-gpu.log" 2>&1 || status=1
gpu_ctest -R "$MLA_GPU_SERIAL_TESTS" -V >>"$out/ctest-gpu.log" 2>&1 || status=1
# The measured figures the whole-model tests print (errors against HF, near-tie rows, batch
# invariance, the tuned GEMMs), and the CUDA server's load test, into the log and the call's output.
if [ -x build-gpu/tests/mla_gpu_model_tests ]; then
  build-gpu/tests/mla_gpu_model_tests --gtest_filter='*Golden*:*Engine*:*StepGraphs*:*TunedGemm*' \
    2>&1 | grep -E "^\[ cuda|^\[  FAILED|^\[  PASSED" | tee -a "$out/ctest-gpu.log"
fi
grep -E "complete streams|differ from" "$out/ctest-gpu.log" | cut -c1-400
grep -E "tests passed|FAILED|Failed|\*\*\*" "$out/ctest-gpu.log" | grep -v "^\[  FAILED" | head -30

# The whole model (DeepSeek-V2-Lite shapes, dummy weights): one decode step at batch 128 and 2k
# context against the HBM roofline, then offline throughput at 1000/1000 with 256 concurrent
# requests. Each under a timeout, so a hang cannot eat the call; text to bench-decode.txt, the two
# JSON objects in bench-model.json.
if [ -n "${MLA_SKIP_MODEL_BENCH:-}" ]; then
  echo "MLA_SKIP_MODEL_BENCH set: model benchmarks skipped"
elif build-gpu/mla bench throughput --help >/dev/null 2>&1; then
  model_args=(--model-preset deepseek-v2-lite --load-format dummy --json)
  json_or_null() { if [ -s "$1" ]; then cat "$1"; else echo null; fi; }
  write_model_json() {
    printf '{"commit": "%s",\n"step": %s,\n"throughput": %s}\n' "$commit" \
      "$(json_or_null build-gpu/bench-step.json)" "$(json_or_null build-gpu/bench-throughput.json)" \
      >"$out/bench-model.json"
  }
  rm -f build-gpu/bench-step.json build-gpu/bench-throughput.json
  step "model step benchmark (batch 128, context 2048)"
  echo "== mla bench step" >>"$out/bench-decode.txt"
  timeout -k 10 150 build-gpu/mla bench step "${model_args[@]}" --batch 128 --context 2048 --profile \
    >build-gpu/bench-step.json 2>>"$out/bench-decode.txt" || { echo "FAILED ($?)"; status=1; }
  write_model_json  # now too: a call cut short in the throughput run keeps the step's JSON
  step "model throughput benchmark (1000/1000, 256 prompts, 256 concurrent)"
  echo "== mla bench throughput" >>"$out/bench-decode.txt"
  timeout -k 10 240 build-gpu/mla bench throughput "${model_args[@]}" --input-len 1000 \
    --output-len 1000 --num-prompts 256 --max-concurrency 256 \
    >build-gpu/bench-throughput.json 2>>"$out/bench-decode.txt" || { echo "FAILED ($?)"; status=1; }
  write_model_json
  sed -n '/== mla bench step/,$p' "$out/bench-decode.txt" | tr '\r' '\n' |
    grep -vE "^mla bench: (requests|loading weights) \[" | grep -v '^$'
else
  echo "this build has no \`mla bench throughput\`: model benchmarks skipped"
fi

step "decode benchmark ($mode)"
bench_args=(--json "$out/bench-decode.json" --commit "$commit" --kernel "${MLA_DECODE_KERNELS:-all}")
[ "$mode" = quick ] && bench_args+=(--quick)
[ -d .carry/flashmla/csrc ] && bench_args+=(--flashmla-same-run)  # FlashMLA timed beside ours
echo "== mla bench decode" >>"$out/bench-decode.txt"  # after the model benchmarks' text
build-gpu/mla bench decode "${bench_args[@]}" >build-gpu/bench-decode-table.txt 2>/dev/null || status=1
tee -a "$out/bench-decode.txt" <build-gpu/bench-decode-table.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv >>"$out/env.txt" 2>&1

# Optional: Nsight Compute on some configurations (MLA_PROFILE="b,s_q,h_q,s_k[;b,s_q,h_q,s_k...]"),
# the split-KV kernel of the fast path, clocks left alone.
if [ -n "${MLA_PROFILE:-}" ] && command -v ncu >/dev/null; then
  : >"$out/ncu.txt"
  IFS=';' read -ra profile_configs <<<"$MLA_PROFILE"
  for config in "${profile_configs[@]}"; do
    step "ncu profile of $config"
    echo "=== $config" >>"$out/ncu.txt"
    ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:mla_decode_splitkv \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section ComputeWorkloadAnalysis --section SchedulerStats --section LaunchStats \
        build-gpu/mla bench decode --only "$config" --runs 1 --kernel fast --flashmla-ref "" \
        >>"$out/ncu.txt" 2>&1 || echo "ncu failed (see ncu.txt)"
  done
  grep -E "^===|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued" "$out/ncu.txt"
fi

step "Python extension: pytest suite and API benchmark ($mode)"
if compgen -G "build-gpu/python/mla_decode/_C*.so" >/dev/null; then
  python_bench_args=()
  [ "$mode" = quick ] && python_bench_args+=(--quick)
  python_log=build-gpu/python-tests.log
  (
    export PYTHONPATH="$PWD/build-gpu/python"
    echo "== python: pytest python/tests ($(date -u +%H:%M:%S))"
    python3 -m pytest -q -p no:cacheprovider python/tests
    python_status=$?
    echo "== python: API benchmark ($(date -u +%H:%M:%S))"
    python3 python/bench/bench_flash_mla_api.py "${python_bench_args[@]}" || python_status=1
    exit $python_status
  ) >"$python_log" 2>&1 || status=1
  cat "$python_log" >>"$out/ctest-gpu.log"
  grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$python_log" | tail -15
  sed -n '/== python: API benchmark/,$p' "$python_log"
else
  echo "not built: $(grep -E "mla.cpp: Python extension" "$out/build.log" | tail -1)" |
    tee -a "$out/ctest-gpu.log"
fi

step "CPU tests"
# The server's end-to-end test drives it with the `openai` package, which the GPU machine may lack;
# `format` needs clang-format, which it lacks. Anchored: a bare "format" also matched
# cli.flags.load_format, which then never ran there.
cpu_exclude="^format$"
python3 -c "import openai" 2>/dev/null || cpu_exclude="^format$|^server[.]openai_e2e$"
(cd build-gpu && ctest -L cpu -j "$(nproc)" --output-on-failure -E "$cpu_exclude") >"$out/ctest-cpu.log" 2>&1 || status=1
tail -4 "$out/ctest-cpu.log"

step "demo"
build-gpu/mla demo >build-gpu/demo.log 2>&1 || status=1
{ echo "== demo"; cat build-gpu/demo.log; } >>"$out/ctest-cpu.log"
cat build-gpu/demo.log

step "done, status $status"
exit $status

# shellcheck shell=bash
# Sourced by the scripts that run ON the lent GPU machine (check.sh, decode-ab.sh):
# how a source tree is configured and built for sm_90a there (with FlashMLA built in when
# .carry/flashmla exists), which GPU tests must run one at a time, and how the GPU label runs.

# The GPU tests that size themselves by the free GPU memory (the memory plan, the servers) or time
# themselves: one at a time, after the others (which run four at a time).
# shellcheck disable=SC2034  # used by the scripts that source this one
MLA_GPU_SERIAL_TESTS='CudaMemoryPlan|server\..*\.cuda|Timing'

# mla_gpu_configure SOURCE BUILD [cmake args...]: Release, ptxas report on, the dependencies that
# scripts/gpu/bundle-deps.sh put in .carry/deps (relative to the current directory), Ninja if
# the machine has it.
mla_gpu_configure() {
  local source=$1 build=$2
  shift 2
  local generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  # FlashMLA for the same-run comparison, when scripts/gpu/flashmla-bundle.sh put it in .carry.
  local flashmla=()
  [ -d .carry/flashmla/csrc ] && flashmla=(-DMLA_FLASHMLA_DIR="$PWD/.carry/flashmla")
  cmake -S "$source" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DMLA_PTXAS_VERBOSE=ON -DMLA_DEPS_DIR="$PWD/.carry/deps" "${flashmla[@]}" "$@"
}

# mla_gpu_build OUT T0: configures and builds this tree into build-gpu (log OUT/build.log, the
# ptxas report OUT/ptxas.txt); prints the time since T0 (seconds since the epoch). On a failed
# build prints the errors and returns 1.
mla_gpu_build() {
  local out=$1 t0=$2
  if ! { mla_gpu_configure . build-gpu -DMLA_BUILD_PYTHON=OFF && cmake --build build-gpu -j "$(nproc)"; } >"$out/build.log" 2>&1; then
    echo "BUILD FAILED"
    grep -E "error" "$out/build.log" | head -20
    return 1
  fi
  grep -E "Compiling entry|registers|spill|C75[0-9][0-9]" "$out/build.log" >"$out/ptxas.txt"
  echo "tree built ($(($(date +%s) - t0)) s)"
}

# mla_gpu_label LOG: the whole GPU label of build-gpu, four tests at a time and then the serial
# ones, into LOG; prints the totals and what a failed test said.
mla_gpu_label() {
  local log=$1
  local ctest_args=(-L gpu --output-on-failure --timeout "${MLA_CTEST_TIMEOUT:-300}")
  (cd build-gpu && ctest "${ctest_args[@]}" -j 4 -E "$MLA_GPU_SERIAL_TESTS") >"$log" 2>&1
  (cd build-gpu && ctest "${ctest_args[@]}" -R "$MLA_GPU_SERIAL_TESTS") >>"$log" 2>&1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$log"
  grep -E -A8 "Failure$" "$log" | head -80  # what a failed test said
}

# shellcheck shell=bash
# Sourced by the scripts that run ON the lent GPU machine (check.sh, decode-ab.sh): how a source
# tree is configured for sm_90a there (with FlashMLA built in when .carry/flashmla exists), and
# which GPU tests must run one at a time.

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

// FlashMlaSameRun in a build without FlashMLA (MLA_FLASHMLA_DIR unset): it says how to build it in.
#include "bench/flashmla_same_run.h"

#include "core/error.h"

namespace mla::bench {

struct FlashMlaSameRun::State {};

bool FlashMlaSameRun::available() {
  return false;
}

FlashMlaSameRun::FlashMlaSameRun(const FlashMlaProblem&, cudaStream_t) {
  throw_error(
      "this build has no FlashMLA: run scripts/gpu/flashmla-bundle.sh, then configure with "
      "-DMLA_FLASHMLA_DIR=<repo>/.carry/flashmla (scripts/gpu/check.sh does when it exists)");
}

FlashMlaSameRun::~FlashMlaSameRun() = default;

void FlashMlaSameRun::run(cudaStream_t) {}

const void* FlashMlaSameRun::out() const {
  return nullptr;
}

}  // namespace mla::bench

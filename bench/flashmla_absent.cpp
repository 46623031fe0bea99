// FlashMlaSameRun in a build without FlashMLA (MLA_FLASHMLA_DIR unset): it says how to build it in.
#include "bench/flashmla_same_run.h"

#include "core/error.h"

namespace mla::bench {

struct FlashMlaSameRun::State {};

bool FlashMlaSameRun::available() {
  return false;
}

FlashMlaSameRun::FlashMlaSameRun(const FlashMlaProblem&, cudaStream_t) {
  throw_error("{}", kFlashMlaBuildHint);
}

FlashMlaSameRun::~FlashMlaSameRun() = default;

void FlashMlaSameRun::run(cudaStream_t) {}

const bf16* FlashMlaSameRun::out() const {
  return nullptr;
}

}  // namespace mla::bench

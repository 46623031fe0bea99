// The per-thread phase listener of phase_marks.h.
#include "mla/kernels/phase_marks.h"

namespace mla::kernels {
namespace {

thread_local PhaseListener* current_listener = nullptr;

}  // namespace

PhaseListener* set_phase_listener(PhaseListener* listener) {
  PhaseListener* previous = current_listener;
  current_listener = listener;
  return previous;
}

void mark_phase(const char* name, cudaStream_t stream) {
  if (current_listener != nullptr) current_listener->phase(name, stream);
}

}  // namespace mla::kernels

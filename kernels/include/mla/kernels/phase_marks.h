// Named phases inside the kernel tier's multi-kernel launch functions, for a profiler above the
// tier: launch_mla_decode marks "split_kv" and (when the combine is its own launch) "combine";
// launch_moe_experts marks "plan", "gate_up", "down" and "unpermute", each just before that
// phase's first launch on `stream`. The tier knows nothing of who listens (the CUDA backend's op
// profiler records an event per mark). The one subtle thing: the listener is per thread and unset
// by default, so a mark costs one thread-local load when nobody listens, and a listener must not
// be installed while the stream is being captured into a graph (the backend never does).
#pragma once

#include <cuda_runtime_api.h>

namespace mla::kernels {

class PhaseListener {
 public:
  // `name` is a string literal of the launch function (it outlives the call).
  virtual void phase(const char* name, cudaStream_t stream) = 0;

 protected:
  ~PhaseListener() = default;
};

// Installs this thread's listener (nullptr: none); returns the one it replaces.
PhaseListener* set_phase_listener(PhaseListener* listener);

// Called by launch functions before a phase's first launch; nothing without a listener.
void mark_phase(const char* name, cudaStream_t stream);

}  // namespace mla::kernels

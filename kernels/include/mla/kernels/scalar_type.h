// The element type of a kernel argument chosen at run time (activations: fp32 or bf16).
#pragma once

namespace mla::kernels {
enum class ScalarType { kF32, kBF16 };
}

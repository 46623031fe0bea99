#pragma once

// The runtime element type of a kernel's input or output buffer.
namespace mla::kernels {
enum class ScalarType { kF32, kBF16 };
}

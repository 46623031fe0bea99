// Tensor: a strided view of memory that a Backend owns (host memory for the CPU backend, device
// memory for a GPU one). The model only shapes and slices views; the backend's ops read and write
// the memory.
//
// Up to 4 dimensions, strides in elements, the innermost dimension always contiguous (stride 1):
// every op can walk rows. A stride may be 0 to broadcast (k_pe, shared by all heads, seen as
// [tokens, heads, 64]). `storage` keeps the allocation alive while any view of it lives.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

namespace mla::model {

// kBF16 holds mla::bf16 (a GPU backend's activations, weights and latent cache).
enum class DType { kF32, kI32, kBF16 };

size_t dtype_size(DType dtype);

struct Tensor {
  std::shared_ptr<void> storage;
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> stride{};

  int64_t size(int dim) const { return shape[dim]; }
  int64_t numel() const;
  bool is_contiguous() const;
  bool empty() const { return data == nullptr; }

  // The view [begin, begin + count) along `dim`.
  Tensor slice(int dim, int64_t begin, int64_t count) const;
  // The same elements under a new shape; needs a contiguous tensor.
  Tensor reshape(std::initializer_list<int64_t> new_shape) const;
  // Splits dimension `dim` into [outer, inner] (outer · inner = its size), whatever the strides:
  // a [tokens, heads · d] view of wider rows becomes [tokens, heads, d] of the same rows.
  Tensor unflatten(int dim, int64_t outer, int64_t inner) const;
  // Inserts a dimension of size 1 before `dim`.
  Tensor unsqueeze(int dim) const;
  // Repeats a size-1 dimension `count` times with stride 0 (a read-only view).
  Tensor broadcast(int dim, int64_t count) const;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Contiguous strides for `shape` (helper for backends).
Tensor make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape);

std::string describe(const Tensor& tensor);  // "f32 [2, 16, 576] strides [...]"

}  // namespace mla::model

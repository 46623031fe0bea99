// Tensor views; see tensor.h.
#include "model/tensor.h"

#include <fmt/format.h>

#include "core/error.h"

namespace mla::model {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return sizeof(float);
    case DType::kI32:
      return sizeof(int32_t);
    case DType::kBF16:
      return 2;
  }
  return 0;
}

int64_t Tensor::numel() const {
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) count *= shape[d];
  return count;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

Tensor Tensor::slice(int dim, int64_t begin, int64_t count) const {
  MLA_CHECK(dim >= 0 && dim < rank);
  MLA_CHECK(begin >= 0 && count >= 0 && begin + count <= shape[dim]);
  Tensor view = *this;
  view.data = static_cast<char*>(data) + begin * stride[dim] * int64_t(dtype_size(dtype));
  view.shape[dim] = count;
  return view;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> new_shape) const {
  MLA_CHECK(is_contiguous());
  Tensor view = make_contiguous_view(data, dtype, new_shape);
  MLA_CHECK_EQ(view.numel(), numel());
  view.storage = storage;
  return view;
}

Tensor Tensor::unflatten(int dim, int64_t outer, int64_t inner) const {
  MLA_CHECK(dim >= 0 && dim < rank && rank < 4);
  MLA_CHECK(outer >= 0 && inner >= 0);
  MLA_CHECK_EQ(outer * inner, shape[dim]);
  Tensor view = *this;
  for (int d = rank; d > dim + 1; --d) {
    view.shape[d] = shape[d - 1];
    view.stride[d] = stride[d - 1];
  }
  view.shape[dim] = outer;
  view.stride[dim] = inner * stride[dim];
  view.shape[dim + 1] = inner;
  view.stride[dim + 1] = stride[dim];
  view.rank = rank + 1;
  return view;
}

Tensor Tensor::unsqueeze(int dim) const {
  MLA_CHECK(dim >= 0 && dim <= rank && rank < 4);
  Tensor view = *this;
  for (int d = rank; d > dim; --d) {
    view.shape[d] = shape[d - 1];
    view.stride[d] = stride[d - 1];
  }
  view.shape[dim] = 1;
  view.stride[dim] = dim < rank ? shape[dim] * stride[dim] : 1;
  view.rank = rank + 1;
  return view;
}

Tensor Tensor::broadcast(int dim, int64_t count) const {
  MLA_CHECK(dim >= 0 && dim < rank);
  MLA_CHECK_EQ(shape[dim], 1);
  Tensor view = *this;
  view.shape[dim] = count;
  view.stride[dim] = 0;
  return view;
}

Tensor make_contiguous_view(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  MLA_CHECK(shape.size() >= 1 && shape.size() <= 4);
  Tensor tensor;
  tensor.data = data;
  tensor.dtype = dtype;
  tensor.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t extent : shape) tensor.shape[d++] = extent;
  int64_t stride = 1;
  for (d = tensor.rank - 1; d >= 0; --d) {
    tensor.stride[d] = stride;
    stride *= tensor.shape[d];
  }
  return tensor;
}

std::string describe(const Tensor& tensor) {
  std::string shape, strides;
  for (int d = 0; d < tensor.rank; ++d) {
    shape += fmt::format("{}{}", d ? ", " : "", tensor.shape[d]);
    strides += fmt::format("{}{}", d ? ", " : "", tensor.stride[d]);
  }
  return fmt::format("{} [{}] strides [{}]",
                     tensor.dtype == DType::kF32   ? "f32"
                     : tensor.dtype == DType::kI32 ? "i32"
                                                   : "bf16",
                     shape, strides);
}

}  // namespace mla::model

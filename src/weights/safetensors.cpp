// Safetensors parsing and validation; see safetensors.h.
#include "weights/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/dtypes.h"
#include "core/error.h"

namespace mla::weights {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::kBool, "BOOL", 1}, {DType::kU8, "U8", 1},           {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},   {DType::kU16, "U16", 2},         {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI32, "I32", 4},         {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},   {DType::kF64, "F64", 8},         {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},   {DType::kF8_E4M3, "F8_E4M3", 1}, {DType::kF8_E5M2, "F8_E5M2", 1},
};

// The safetensors library refuses headers above 100 MB; so do we (a corrupt length field must not
// make us parse gigabytes of weights as JSON).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const DTypeEntry* find_dtype(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes)
    if (name == entry.name) return &entry;
  return nullptr;
}

}  // namespace

const char* dtype_name(DType dtype) {
  for (const DTypeEntry& entry : kDTypes)
    if (entry.dtype == dtype) return entry.name;
  return "?";
}

size_t dtype_size(DType dtype) {
  for (const DTypeEntry& entry : kDTypes)
    if (entry.dtype == dtype) return entry.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return text + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : mapping_(MappedFile::open(path)), path_(std::make_unique<std::string>(path)) {
  const uint64_t file_size = mapping_.size();
  if (file_size < 8)
    throw_error(
        "{}: not a safetensors file: {} bytes, shorter than the 8-byte header length (truncated?)",
        path, file_size);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | mapping_.data()[i];
  if (header_size > file_size - 8)
    throw_error(
        "{}: the header claims {} bytes but only {} follow the length field: the file is "
        "truncated or not a safetensors file",
        path, header_size, file_size - 8);
  if (header_size > kMaxHeaderBytes)
    throw_error("{}: header of {} bytes is larger than the 100 MB safetensors allows (corrupt?)",
                path, header_size);
  const char* header_begin = reinterpret_cast<const char*>(mapping_.data() + 8);
  const nlohmann::json header =
      nlohmann::json::parse(header_begin, header_begin + header_size, nullptr, false);
  if (header.is_discarded())
    throw_error("{}: the {}-byte header is not valid JSON (corrupt or not a safetensors file)",
                path, header_size);
  if (!header.is_object()) throw_error("{}: the header is JSON but not an object of tensors", path);

  const uint8_t* data_begin = mapping_.data() + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw_error("{}: __metadata__ is not an object", path);
      for (const auto& [key, value] : entry.items())
        metadata_[key] = value.is_string() ? value.get<std::string>() : value.dump();
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      throw_error("{}: tensor '{}' lacks dtype, shape or data_offsets in the header", path, name);
    const auto& dtype_json = entry["dtype"];
    const DTypeEntry* dtype =
        dtype_json.is_string() ? find_dtype(dtype_json.get<std::string>()) : nullptr;
    if (dtype == nullptr)
      throw_error("{}: tensor '{}' has dtype {}, which is not a safetensors dtype", path, name,
                  dtype_json.dump());
    TensorInfo info;
    info.name = name;
    info.dtype = dtype->dtype;
    info.file = path_.get();
    const auto& shape_json = entry["shape"];
    if (!shape_json.is_array())
      throw_error("{}: tensor '{}' has shape {}, not a list", path, name, shape_json.dump());
    // Each dimension and the running product stay below 2^62: no overflow, and the byte count is
    // then compared with the data actually present.
    uint64_t numel = 1;
    for (const auto& dim : shape_json) {
      if (!dim.is_number_unsigned() || dim.get<uint64_t>() > (1ull << 40))
        throw_error("{}: tensor '{}' has shape {}: dimensions must be integers 0..2^40", path, name,
                    shape_json.dump());
      const uint64_t extent = dim.get<uint64_t>();
      if (extent != 0 && numel > (std::numeric_limits<uint64_t>::max() >> 2) / extent)
        throw_error("{}: tensor '{}' has shape {}: too many elements", path, name,
                    shape_json.dump());
      numel *= extent;
      info.shape.push_back(static_cast<int64_t>(extent));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned())
      throw_error("{}: tensor '{}' has data_offsets {}, expected [begin, end]", path, name,
                  offsets.dump());
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw_error(
          "{}: tensor '{}' has data_offsets [{}, {}) but the data section holds {} bytes: the "
          "file is truncated or corrupt",
          path, name, begin, end, data_size);
    const uint64_t expected_bytes = numel * dtype->size;
    if (end - begin != expected_bytes)
      throw_error("{}: tensor '{}' ({} {}) should take {} bytes but data_offsets give {}", path,
                  name, dtype->name, shape_string(info.shape), expected_bytes, end - begin);
    info.data = data_begin + begin;
    info.bytes = static_cast<size_t>(end - begin);
    tensors_.push_back(std::move(info));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorInfo& info, std::string_view key) { return info.name < key; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void convert_to_f32(const TensorInfo& tensor, float* out) {
  const int64_t count = tensor.numel();
  const uint8_t* bytes = tensor.data;
  switch (tensor.dtype) {
    case DType::kF32:
      std::memcpy(out, bytes, static_cast<size_t>(count) * sizeof(float));
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < count; ++i) {
        bf16 value;
        std::memcpy(&value.bits, bytes + 2 * i, 2);
        out[i] = bf16_to_float(value);
      }
      return;
    case DType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        out[i] = f16_to_float(bits);
      }
      return;
    case DType::kF8_E4M3:
      for (int64_t i = 0; i < count; ++i) out[i] = fp8_e4m3_to_float(bytes[i]);
      return;
    default:
      throw_error(
          "{}: tensor '{}' has dtype {}, which mla.cpp cannot load as a weight (supported: BF16, "
          "F16, F32, F8_E4M3)",
          *tensor.file, tensor.name, dtype_name(tensor.dtype));
  }
}

}  // namespace mla::weights
